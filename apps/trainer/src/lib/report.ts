import type { RunErrorRecord } from './error-log.js';
import type { MetricsRecord } from './metrics-log.js';

/** One plot of the report: a metric over steps. */
export interface ReportPlot {
  title: string;
  /** Metric names drawn as lines on this plot. */
  metrics: readonly string[];
  /** Shown under the title. */
  description?: string;
}

/** The plots every training report shows. */
export const defaultReportPlots: readonly ReportPlot[] = [
  {
    title: 'Reward',
    metrics: ['rollout/raw_reward_trajectory_mean'],
    description: 'Mean trajectory reward (anchor segment) per step.',
  },
  {
    title: 'Train / rollout logprob difference',
    metrics: [
      'parity/logprob_abs_diff',
      'parity/logprob_abs_diff_max',
      'offpolicy/logprob_abs_diff',
      'offpolicy/logprob_abs_diff_max',
    ],
    description:
      'Mean and max |trainer logprob − rollout logprob|: parity over tokens of the weights the trainer ' +
      'holds (bar 1e-4), the off-policy gap over tokens of older weights.',
  },
  {
    title: 'Version gap',
    metrics: [
      'version_gap/tokens_0',
      'version_gap/tokens_1',
      'version_gap/tokens_2',
      'version_gap/tokens_3_plus',
    ],
    description:
      'Share of trained tokens generated 0, 1, 2 and 3 or more weight versions before the trainer’s.',
  },
  {
    title: 'Segments per trajectory',
    metrics: ['rollout/segments_per_trajectory_mean', 'rollout/segments_per_trajectory_max'],
  },
  { title: 'Throughput', metrics: ['perf/tokens_per_second'], description: 'Trained tokens per second.' },
  {
    title: 'Trainer idle',
    metrics: ['perf/trainer_idle_fraction'],
    description: 'Fraction of wall time the trainer waited for rollouts.',
  },
  {
    title: 'Collapse alarm',
    metrics: ['alarm/grad_norm_ratio', 'alarm/uniform_groups'],
    description:
      'Gradient norm over its running median (the alarm rings at 5) and the share of groups that scored ' +
      'the same (no advantage to learn from). Steps where the alarm rang are marked in red on every plot.',
  },
];

const palette = ['#2563eb', '#dc2626', '#16a34a', '#9333ea'];

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (character) => `&#${character.charCodeAt(0)};`);
}

function formatNumber(value: number): string {
  if (value === 0) return '0';
  const magnitude = Math.abs(value);
  if (magnitude >= 1000 || magnitude < 0.001) return value.toExponential(2);
  return Number(value.toPrecision(3)).toString();
}

/** Renders one plot as an inline SVG line chart (no script, no external resources). */
export function renderPlotSvg(plot: ReportPlot, records: readonly MetricsRecord[]): string {
  const width = 560;
  const height = 220;
  const margin = { left: 64, right: 16, top: 12, bottom: 32 };
  const series = plot.metrics.map((name) => ({
    name,
    points: records
      .filter((record) => Number.isFinite(record.metrics[name]))
      .map((record) => [record.step, record.metrics[name] as number] as const),
  }));
  const all = series.flatMap((line) => line.points);
  if (all.length === 0) {
    return `<svg viewBox="0 0 ${width} ${height}" role="img" aria-label="${escapeHtml(plot.title)}: no data"><text x="${width / 2}" y="${height / 2}" text-anchor="middle" fill="#6b7280">no data</text></svg>`;
  }
  const minimumX = Math.min(...all.map(([x]) => x));
  let maximumX = Math.max(...all.map(([x]) => x));
  let minimumY = Math.min(...all.map(([, y]) => y));
  let maximumY = Math.max(...all.map(([, y]) => y));
  if (maximumX === minimumX) maximumX = minimumX + 1;
  if (maximumY === minimumY) {
    minimumY -= Math.abs(minimumY) * 0.1 || 1;
    maximumY += Math.abs(maximumY) * 0.1 || 1;
  }
  const innerWidth = width - margin.left - margin.right;
  const innerHeight = height - margin.top - margin.bottom;
  const x = (value: number) => margin.left + ((value - minimumX) / (maximumX - minimumX)) * innerWidth;
  const y = (value: number) => margin.top + (1 - (value - minimumY) / (maximumY - minimumY)) * innerHeight;
  const parts: string[] = [
    `<svg viewBox="0 0 ${width} ${height}" role="img" aria-label="${escapeHtml(plot.title)}">`,
    `<rect x="${margin.left}" y="${margin.top}" width="${innerWidth}" height="${innerHeight}" fill="#f9fafb" stroke="#e5e7eb"/>`,
  ];
  for (let tick = 0; tick <= 4; tick++) {
    const value = minimumY + ((maximumY - minimumY) * tick) / 4;
    parts.push(
      `<text x="${margin.left - 6}" y="${y(value) + 4}" text-anchor="end" font-size="11" fill="#374151">${formatNumber(value)}</text>`,
    );
    parts.push(
      `<line x1="${margin.left}" x2="${width - margin.right}" y1="${y(value)}" y2="${y(value)}" stroke="#e5e7eb"/>`,
    );
  }
  parts.push(
    `<text x="${margin.left}" y="${height - 8}" font-size="11" fill="#374151">step ${formatNumber(minimumX)}</text>`,
    `<text x="${width - margin.right}" y="${height - 8}" text-anchor="end" font-size="11" fill="#374151">step ${formatNumber(maximumX)}</text>`,
  );
  // Steps where the collapse alarm rang, marked on every plot so a fall is read against its cause.
  for (const record of records) {
    if (record.metrics['alarm/raised'] !== 1 || record.step < minimumX || record.step > maximumX) continue;
    const at = x(record.step).toFixed(1);
    parts.push(
      `<line class="alarm" x1="${at}" x2="${at}" y1="${margin.top}" y2="${height - margin.bottom}" stroke="#dc2626" stroke-dasharray="3 3"><title>collapse alarm at step ${record.step}</title></line>`,
    );
  }
  series.forEach((line, index) => {
    if (line.points.length === 0) return;
    const color = palette[index % palette.length];
    const path = line.points.map(
      ([px, py], point) => `${point === 0 ? 'M' : 'L'}${x(px).toFixed(1)},${y(py).toFixed(1)}`,
    );
    parts.push(
      `<path d="${path.join(' ')}" fill="none" stroke="${color}" stroke-width="1.8"><title>${escapeHtml(line.name)}</title></path>`,
    );
  });
  parts.push('</svg>');
  return parts.join('');
}

/** Summary figures shown above the plots. */
export interface ReportSummary {
  name: string;
  generatedAt: string;
  facts: Record<string, string | number>;
}

/** Rows of the report's error table: the most recent ones, the rest counted. */
const reportedErrors = 50;

/** The report's error section: counts by stage and code, then the most recent failures. */
export function renderErrorsHtml(errors: readonly RunErrorRecord[]): string {
  if (errors.length === 0) return '';
  const counts = new Map<string, number>();
  for (const error of errors) {
    const key = `${error.stage} ${error.code}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const summary = [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([key, count]) => `${escapeHtml(key)}: ${count}`)
    .join('; ');
  const shown = errors.slice(-reportedErrors);
  const cell = (value: unknown) => `<td>${escapeHtml(value === null ? '' : String(value))}</td>`;
  const rows = shown
    .map(
      (error) =>
        `<tr>${cell(error.step + 1)}${cell(error.stage)}${cell(error.where)}${cell(error.sample_index)}${cell(error.session_id)}${cell(error.retry)}${cell(error.code)}${cell(error.trained ? 'yes' : 'no')}${cell(error.message.slice(0, 300))}</tr>`,
    )
    .join('');
  const more = errors.length > shown.length ? ` (the last ${shown.length} shown)` : '';
  return `<section class="errors"><h2>Errors</h2><p>${errors.length} recorded in errors.jsonl${more}: ${summary}.</p>
<table><tr><th>step</th><th>stage</th><th>where</th><th>sample</th><th>session</th><th>retry</th><th>code</th><th>trained</th><th>message</th></tr>${rows}</table></section>`;
}

/** A self-contained HTML report: summary table, one SVG plot per metric group, legends, errors. */
export function renderReportHtml(
  summary: ReportSummary,
  records: readonly MetricsRecord[],
  plots: readonly ReportPlot[] = defaultReportPlots,
  errors: readonly RunErrorRecord[] = [],
): string {
  const rows = Object.entries(summary.facts)
    .map(([key, value]) => `<tr><th>${escapeHtml(key)}</th><td>${escapeHtml(String(value))}</td></tr>`)
    .join('');
  const sections = plots
    .map((plot) => {
      const legend = plot.metrics
        .map(
          (name, index) =>
            `<span class="legend"><i style="background:${palette[index % palette.length]}"></i>${escapeHtml(name)}</span>`,
        )
        .join('');
      const description = plot.description ? `<p>${escapeHtml(plot.description)}</p>` : '';
      return `<section><h2>${escapeHtml(plot.title)}</h2>${description}${renderPlotSvg(plot, records)}<div>${legend}</div></section>`;
    })
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(summary.name)} — Dressage training report</title>
<style>
body{font-family:system-ui,sans-serif;margin:24px;color:#111827;max-width:1200px}
table{border-collapse:collapse;margin-bottom:16px}th,td{text-align:left;padding:2px 12px 2px 0;font-size:14px}
main{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:16px}
section{border:1px solid #e5e7eb;border-radius:6px;padding:8px 12px}h2{font-size:16px;margin:4px 0}
p{font-size:12px;color:#4b5563;margin:2px 0 6px}svg{width:100%;height:auto}
.errors{margin-top:16px}.errors td{font-size:12px;vertical-align:top}
.legend{font-size:12px;margin-right:12px}.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
</style></head>
<body><h1>${escapeHtml(summary.name)}</h1><p>Generated ${escapeHtml(summary.generatedAt)}; ${records.length} steps.</p>
<table>${rows}</table>
<main>
${sections}
</main>
${renderErrorsHtml(errors)}</body></html>
`;
}
