import { describe, expect, it } from 'vitest';
import { SimulatedEngine, VirtualClock } from '../bench/engine-model.js';

// The engine the scheduler benchmark runs every mode on: what it charges must be what continuous
// batching charges, or the benchmark's speedups are wrong.
describe('SimulatedEngine', () => {
  it('decodes one request alone at one token per step', async () => {
    const clock = new VirtualClock();
    const engine = new SimulatedEngine(clock, { slots: 4, stepSeconds: 0.02, perRequestSeconds: 0.01 });
    const done = await clock.run(engine.generate(100).then((result) => ({ ...result, at: clock.now })));
    // 100 tokens × (20 ms + 10 ms × 1 running).
    expect(done.at).toBeCloseTo(3, 9);
    expect(done.generatedTokens).toBeCloseTo(100, 9);
    expect(done.queuedSeconds).toBe(0);
  });

  it('slows every running request as the batch grows, and speeds up when one leaves', async () => {
    const clock = new VirtualClock();
    const engine = new SimulatedEngine(clock, { slots: 4, stepSeconds: 0.02, perRequestSeconds: 0.01 });
    const ends: Record<string, number> = {};
    await clock.run(
      Promise.all([
        engine.generate(100).then(() => {
          ends.long = clock.now;
        }),
        engine.generate(50).then(() => {
          ends.short = clock.now;
        }),
      ]),
    );
    // Both running: 40 ms a step, so 50 tokens take 2 s; then the long one alone, 30 ms a step.
    expect(ends.short).toBeCloseTo(2, 9);
    expect(ends.long).toBeCloseTo(2 + 50 * 0.03, 9);
    expect(engine.generatedTokens).toBeCloseTo(150, 6);
    expect(engine.peakRunning).toBe(2);
  });

  it('queues requests beyond its slots, first come first served', async () => {
    const clock = new VirtualClock();
    const engine = new SimulatedEngine(clock, { slots: 1, stepSeconds: 0.02, perRequestSeconds: 0 });
    const [first, second] = await clock.run(Promise.all([engine.generate(100), engine.generate(100)]));
    expect(first.queuedSeconds).toBe(0);
    expect(second.queuedSeconds).toBeCloseTo(2, 9);
    expect(clock.now).toBeCloseTo(4, 9);
    expect(engine.peakRunning).toBe(1);
  });

  it('frees the slot of an aborted request at once and counts the tokens it decoded', async () => {
    const clock = new VirtualClock();
    const engine = new SimulatedEngine(clock, { slots: 1, stepSeconds: 0.02, perRequestSeconds: 0 });
    const controller = new AbortController();
    let decodedBeforeAbort = Number.NaN;
    const aborted = engine
      .generate(100, controller.signal, (tokens) => {
        decodedBeforeAbort = tokens;
      })
      .then(
        () => 'completed',
        () => 'aborted',
      );
    const next = engine.generate(100).then((result) => ({ ...result, at: clock.now }));
    void clock.sleep(1).then(() => controller.abort(new Error('stop')));
    const [outcome, second] = await clock.run(Promise.all([aborted, next]));
    expect(outcome).toBe('aborted');
    expect(decodedBeforeAbort).toBeCloseTo(50, 9);
    expect(second.queuedSeconds).toBeCloseTo(1, 9);
    expect(second.at).toBeCloseTo(3, 9);
    expect(engine.generatedTokens).toBeCloseTo(150, 6);
  });

  it('caps throughput at one token per perRequestSeconds however many run', async () => {
    const clock = new VirtualClock();
    const engine = new SimulatedEngine(clock, { slots: 1000, stepSeconds: 0.02, perRequestSeconds: 0.001 });
    await clock.run(Promise.all(Array.from({ length: 1000 }, () => engine.generate(10))));
    // 10 steps of 20 ms + 1000 × 1 ms: 10,000 tokens in 10.2 s, under the 1,000 tokens/s bound.
    expect(clock.now).toBeCloseTo(10.2, 9);
    expect(engine.generatedTokens / clock.now).toBeLessThan(1 / 0.001);
  });

  it('refuses a capacity that cannot run', () => {
    const clock = new VirtualClock();
    expect(() => new SimulatedEngine(clock, { slots: 0, stepSeconds: 0.02, perRequestSeconds: 0 })).toThrow(
      /slots >= 1/,
    );
  });
});
