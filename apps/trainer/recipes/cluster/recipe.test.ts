// The cluster recipe its README walks through: it loads as shipped, and says what the README says it
// does (SGLang behind a router, the Megatron worker over gRPC, partial-async at two versions, partial
// rollout on a proxy started elsewhere, the worker's slime launch checked by the dry run).
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadRecipe } from '../../src/lib/recipe.js';

const recipePath = fileURLToPath(new URL('./recipe.yaml', import.meta.url));

describe('recipes/cluster/recipe.yaml', () => {
  it('loads and sets what its README describes', async () => {
    const { recipe, resolvePath } = await loadRecipe(recipePath);
    expect(recipe.engine).toMatchObject({ kind: 'sglang', router_url: 'http://10.0.0.2:8000' });
    expect(recipe.trainer).toMatchObject({ kind: 'grpc', address: '10.0.0.3:50051' });
    expect(recipe.rollout).toMatchObject({ mode: 'partial-async', keep_versions: 2 });
    expect(recipe.proxy).toMatchObject({ url: 'http://10.0.0.2:8800', partial_rollout: true });
    const args = recipe.trainer.kind === 'grpc' ? (recipe.trainer.slime_check?.args ?? []) : [];
    expect(args.slice(args.indexOf('--sglang-router-ip'), args.indexOf('--sglang-router-ip') + 4)).toEqual([
      '--sglang-router-ip',
      '10.0.0.2',
      '--sglang-router-port',
      '8000',
    ]);
    // --load holds no checkpoint before the first one is saved: slime then loads --ref-load, which
    // must be given (the dry run refuses the launch without it).
    expect(args[args.indexOf('--ref-load') + 1]).toBe('/ckpt/qwen3.5-4b_torch_dist');
    expect(args[args.indexOf('--load') + 1]).toBe(args[args.indexOf('--save') + 1]);
    // The worker directory the dry run starts `python3 -m dressage_megatron_worker --dry-run` in.
    const workerDirectory =
      recipe.trainer.kind === 'grpc' ? (recipe.trainer.slime_check?.worker_dir ?? null) : null;
    expect(workerDirectory && resolvePath(workerDirectory)).toBe(
      fileURLToPath(new URL('../../../megatron-worker', import.meta.url)),
    );
  });
});
