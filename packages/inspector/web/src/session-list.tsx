import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { SessionSummary } from '../../src/model.js';
import type { InspectorInfo } from '../../src/views/api-types.js';
import type { InspectorApi } from './api.js';

const rowHeight = 34;
const pageSize = 200;
const overscan = 10;

interface Filters {
  search: string;
  rewardMin: string;
  rewardMax: string;
  segmentsMin: string;
  segmentsMax: string;
  aborted: string;
  truncated: string;
  multiVersion: string;
  sort: string;
}

const emptyFilters: Filters = {
  search: '',
  rewardMin: '',
  rewardMax: '',
  segmentsMin: '',
  segmentsMax: '',
  aborted: '',
  truncated: '',
  multiVersion: '',
  sort: '',
};

function formatReward(reward: number | null): string {
  return reward === null ? '—' : Number.isInteger(reward) ? String(reward) : reward.toFixed(3);
}

/** Session list: filters, then a virtualised list whose rows are fetched page by page. */
export function SessionList({ api }: { api: InspectorApi }) {
  const [info, setInfo] = useState<InspectorInfo | null>(null);
  const [filters, setFilters] = useState<Filters>(emptyFilters);
  const [total, setTotal] = useState<number | null>(null);
  const [rows, setRows] = useState<Map<number, SessionSummary>>(new Map());
  const [scrollTop, setScrollTop] = useState(0);
  const [viewportHeight, setViewportHeight] = useState(600);
  const [error, setError] = useState<string | null>(null);
  const viewport = useRef<HTMLDivElement>(null);
  const requested = useRef(new Set<number>());

  const query = useMemo(() => {
    const parameters = new URLSearchParams();
    for (const [name, value] of Object.entries(filters)) if (value !== '') parameters.set(name, value);
    return parameters.toString();
  }, [filters]);

  useEffect(() => {
    api.info().then(setInfo, (failure: Error) => setError(failure.message));
  }, [api]);

  // New filters: forget loaded rows and start from the top.
  useEffect(() => {
    requested.current = new Set();
    setRows(new Map());
    setTotal(null);
    if (viewport.current) viewport.current.scrollTop = 0;
    setScrollTop(0);
  }, [query]);

  useEffect(() => {
    const element = viewport.current;
    if (!element) return;
    const observer = new ResizeObserver(() => setViewportHeight(element.clientHeight));
    observer.observe(element);
    return () => observer.disconnect();
  }, []);

  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const last = Math.min(total ?? pageSize, Math.ceil((scrollTop + viewportHeight) / rowHeight) + overscan);

  useEffect(() => {
    const pages = new Set<number>();
    for (let row = first; row < Math.max(last, first + 1); row++) pages.add(Math.floor(row / pageSize));
    for (const page of pages) {
      if (requested.current.has(page)) continue;
      requested.current.add(page);
      const parameters = new URLSearchParams(query);
      parameters.set('offset', String(page * pageSize));
      parameters.set('limit', String(pageSize));
      const forQuery = query;
      api.sessions(parameters).then(
        (result) => {
          if (forQuery !== query) return;
          setTotal(result.total);
          setRows((previous) => {
            const next = new Map(previous);
            for (const [position, item] of result.items.entries()) next.set(result.offset + position, item);
            return next;
          });
        },
        (failure: Error) => setError(failure.message),
      );
    }
  }, [api, query, first, last]);

  const set = (name: keyof Filters) => (event: Event) =>
    setFilters({ ...filters, [name]: (event.currentTarget as HTMLInputElement).value });

  const visible: preact.JSX.Element[] = [];
  for (let row = first; row < last; row++) {
    const summary = rows.get(row);
    visible.push(
      summary === undefined ? (
        <div class="session-row loading" style={{ top: `${row * rowHeight}px` }} key={row}>
          …
        </div>
      ) : (
        <a
          class="session-row"
          style={{ top: `${row * rowHeight}px` }}
          key={row}
          href={`#/session/${encodeURIComponent(summary.id)}`}
          data-session-id={summary.id}
        >
          <span class="cell id" title={summary.id}>
            {summary.id}
          </span>
          <span class="cell instance" title={summary.instanceId ?? ''}>
            {summary.instanceId ?? '—'}
          </span>
          <span class="cell number">{formatReward(summary.reward)}</span>
          <span class="cell number">{summary.segmentCount}</span>
          <span class="cell number">{summary.trainableCount}</span>
          <span class="cell versions">{summary.versions.join(', ') || '—'}</span>
          <span class={`cell status status-${summary.status}`}>{summary.status}</span>
        </a>
      ),
    );
  }

  return (
    <main class="list-page">
      <section class="source-line">
        {info ? (
          <span>
            {info.kind} <code>{info.path}</code> · {info.sessionCount} sessions
            {typeof info.details.errors === 'number' && info.details.errors > 0 ? (
              <span class="error"> · {info.details.errors} errors (errors.jsonl)</span>
            ) : null}
          </span>
        ) : (
          'loading…'
        )}
        {error ? <span class="error">{error}</span> : null}
      </section>
      <form class="filters" onSubmit={(event) => event.preventDefault()}>
        <input
          name="search"
          placeholder="search session / instance id"
          value={filters.search}
          onInput={set('search')}
        />
        <label>
          reward{' '}
          <input
            name="rewardMin"
            type="number"
            step="any"
            value={filters.rewardMin}
            onInput={set('rewardMin')}
          />
          to{' '}
          <input
            name="rewardMax"
            type="number"
            step="any"
            value={filters.rewardMax}
            onInput={set('rewardMax')}
          />
        </label>
        <label>
          segments{' '}
          <input
            name="segmentsMin"
            type="number"
            min="0"
            value={filters.segmentsMin}
            onInput={set('segmentsMin')}
          />
          to{' '}
          <input
            name="segmentsMax"
            type="number"
            min="0"
            value={filters.segmentsMax}
            onInput={set('segmentsMax')}
          />
        </label>
        {(['aborted', 'truncated', 'multiVersion'] as const).map((name) => (
          <label key={name}>
            {name === 'multiVersion' ? 'multi-version' : name}{' '}
            <select name={name} value={filters[name]} onChange={set(name)}>
              <option value="">any</option>
              <option value="1">yes</option>
              <option value="0">no</option>
            </select>
          </label>
        ))}
        <label>
          sort{' '}
          <select name="sort" value={filters.sort} onChange={set('sort')}>
            <option value="">load order</option>
            <option value="-reward">reward ↓</option>
            <option value="reward">reward ↑</option>
          </select>
        </label>
        <span class="total" data-total={total ?? ''}>
          {total === null ? '…' : `${total} matching`}
        </span>
      </form>
      <div class="session-header">
        <span class="cell id">session</span>
        <span class="cell instance">instance</span>
        <span class="cell number">reward</span>
        <span class="cell number">segments</span>
        <span class="cell number">trainable</span>
        <span class="cell versions">versions</span>
        <span class="cell status">status</span>
      </div>
      <div
        class="session-viewport"
        ref={viewport}
        onScroll={(event) => setScrollTop((event.currentTarget as HTMLDivElement).scrollTop)}
      >
        <div class="session-spacer" style={{ height: `${(total ?? 0) * rowHeight}px` }}>
          {visible}
        </div>
      </div>
    </main>
  );
}
