/// <reference lib="dom" />
// End to end in real headless Chromium (Debian's `chromium`, driven by playwright-core): the page must
// show exactly the masks, reasons, ids and logprobs recorded in the store.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type InspectorServer, listenInspector } from '../src/server.js';
import { TokenDecoder } from '../src/session-detail.js';
import { loadStoreDirectory } from '../src/sources/store-directory.js';
import { type FixtureSegment, qwenTokenizer, writeFixtureStore } from './fixtures.js';

const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
// The closed network here: without the background-networking flags Chromium floods refused connections.
const launchFlags = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

let inspector: InspectorServer;
let segments: FixtureSegment[];
let artifacts: string;

beforeAll(async () => {
  if (!existsSync(executablePath)) {
    // CI installs Chromium, so a missing browser is a broken environment, not a reason to skip.
    throw new Error(
      `Chromium not found at ${executablePath}: install the Debian package with "apt-get install -y chromium" (or set CHROMIUM_PATH)`,
    );
  }
  const fixture = await writeFixtureStore();
  segments = fixture.segments;
  artifacts = mkdtempSync(join(tmpdir(), 'inspector-e2e-'));
  // A failure recorded for session-a, as a run's errors.jsonl holds it.
  const store = loadStoreDirectory(fixture.directory);
  const errors = [
    {
      step: 0,
      stage: 'generate',
      where: 'whitebox agent FlakyAgent',
      session_id: 'session-a',
      retry: 0,
      code: 'unavailable',
      message: 'the weather station is offline',
    },
  ];
  inspector = await listenInspector({
    source: { ...store, errors, details: { ...store.details, errors: errors.length } },
    decoder: new TokenDecoder(await qwenTokenizer()),
    port: 0,
  });
});

afterAll(async () => {
  await inspector?.close();
});

describe('dressage inspect in Chromium', () => {
  it('shows the recorded masks, boundaries and token details of a session', async () => {
    const profile = mkdtempSync(join(tmpdir(), 'inspector-chromium-'));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath,
      headless: true,
      args: launchFlags,
      viewport: { width: 1400, height: 1000 },
    });
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(inspector.url);
      await page.locator('.session-row[data-session-id="session-a"]').waitFor();
      await expect.poll(() => page.locator('.total').textContent()).toBe('2 matching');

      // Search narrows the virtualised list through the server.
      await page.fill('input[name="search"]', 'instance-2');
      await expect.poll(() => page.locator('.session-row').count()).toBe(1);
      expect(await page.locator('.source-line').textContent()).toContain('1 errors (errors.jsonl)');
      await page.fill('input[name="search"]', '');
      await page.locator('.session-row[data-session-id="session-a"]').click();
      // The session's recorded failure is shown with it.
      await page.locator('.session-errors li').waitFor();
      expect(await page.locator('.session-errors li').textContent()).toBe(
        'unavailable in whitebox agent FlakyAgent (step 1, retry 0): the weather station is offline',
      );

      await page.locator('.segment-boundary').first().waitFor();
      const boundaries = await page
        .locator('.segment-boundary')
        .evaluateAll((elements) =>
          elements.map((element) => [
            (element as HTMLElement).dataset.reason,
            (element as HTMLElement).dataset.reasons,
          ]),
        );
      expect(boundaries).toEqual(segments.map((segment) => [segment.reason, segment.reasons.join(',')]));

      for (const [index, segment] of segments.entries()) {
        const tokens = page.locator(`.token-stream[data-segment="${index}"] .token`);
        await expect.poll(() => tokens.count()).toBe(segment.ids.length);
        const shown = await tokens.evaluateAll((elements) =>
          elements.map((element) => ({
            id: Number((element as HTMLElement).dataset.id),
            classes: element.className,
            background: getComputedStyle(element).backgroundColor,
          })),
        );
        expect(shown.map((token) => token.id)).toEqual(segment.ids);
        shown.forEach((token, position) => {
          const expected =
            segment.mask[position] === 1
              ? 'trainable'
              : segment.toolPositions.has(position)
                ? 'tool'
                : 'context';
          expect(token.classes, `segment ${index} token ${position}`).toContain(`token-${expected}`);
        });
        // The colours really differ (the classes are styled, not just present).
        const backgrounds = new Set(shown.map((token) => token.background));
        expect(backgrounds.size).toBeGreaterThanOrEqual(index === 0 ? 3 : 2);
      }

      // Hover a trainable token: the tooltip shows its id and recorded logprob.
      const position = segments[0]!.mask.indexOf(1) + 2;
      await page.locator(`.token-stream[data-segment="0"] .token[data-position="${position}"]`).hover();
      const tooltip = page.locator('#token-tooltip');
      await tooltip.waitFor();
      expect(await tooltip.locator('[data-field="id"]').textContent()).toBe(
        String(segments[0]!.ids[position]),
      );
      expect(Number(await tooltip.locator('[data-field="logprob"]').textContent())).toBeCloseTo(
        segments[0]!.logprobs[position]!,
        4,
      );
      expect(await tooltip.locator('[data-field="version"]').textContent()).toBe('3');

      const screenshot = join(artifacts, 'inspector-session.png');
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`inspector screenshot: ${screenshot}`);
      expect(existsSync(screenshot)).toBe(true);
    } finally {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    }
  });
});
