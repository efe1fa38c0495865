// Public surface of @dressage/tito: loading a model's tokenizer, rendering chats (the model's own
// template or a fixed renderer), and Token-In-Token-Out incremental encoding. The helpers these are
// built from (message normalisation and comparison, canonical JSON, template probes) are in
// `@dressage/tito/internal`.

export {
  type ChatTemplateRendererOptions,
  createChatTemplateRenderer,
  createSnapshotRenderer,
} from './chat-template-renderer.js';
export { type TitoFailureReason, TitoIncrementalError } from './errors.js';
export {
  type ModelFiles,
  readChatTemplateFile,
  readModelFiles,
  type TokenizerConfig,
  type TokenizerJson,
} from './model-directory.js';
export { createChatmlRenderer } from './renderers/chatml-renderer.js';
export {
  createFixedRenderer,
  type FixedRendererOptions,
  inferRendererFamily,
} from './renderers/fixed-renderer.js';
export { createQwen35Renderer } from './renderers/qwen3-5-renderer.js';
export { createQwen3Renderer, type Qwen3RendererOptions } from './renderers/qwen3-renderer.js';
export {
  type ChatRenderer,
  type RendererFamily,
  type RenderOptions,
  rendererFamilies,
} from './renderers/renderer.js';
export { readTemplateText, type TemplateText, type ToolCallText } from './renderers/template-text.js';
export {
  type ContextDelta,
  type FullEncodeOptions,
  type IncrementalRequest,
  TitoEncoder,
  type TitoTextEncoder,
} from './tito-encoder.js';
export { loadTokenizer, TitoTokenizer } from './tokenizer.js';
