/** The smallest valid recipe text: every other field takes its default. Tests append to it. */
export const minimalRecipe = `
name: weather
output_dir: runs/weather
data:
  path: prompts.jsonl
engine:
  kind: embedded
trainer:
  kind: embedded
training:
  steps: 40
`;
