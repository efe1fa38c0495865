// Library surface of the dressage app: recipes, metrics logs, reports and the progress line, for
// tools that drive training runs programmatically.

export { MetricsLog, type MetricsRecord, readMetricsLog } from './lib/metrics-log.js';
export { formatProgressLine, Progress, type ProgressOptions, type ProgressState } from './lib/progress.js';
export {
  hookReferenceSchema,
  type LoadedRecipe,
  loadRecipe,
  lossSchema,
  parseRecipe,
  type Recipe,
  recipeSchema,
} from './lib/recipe.js';
export {
  applyRecipeEnvironment,
  type RecipeEnvironmentVariable,
  recipeEnvironmentVariables,
} from './lib/recipe-environment.js';
export {
  defaultReportPlots,
  type ReportPlot,
  type ReportSummary,
  renderPlotSvg,
  renderReportHtml,
} from './lib/report.js';
