import { useEffect, useRef, useState } from 'preact/hooks';
import type { SegmentDetail, SessionDetail, TokenRow } from '../../src/views/api-types.js';
import { tokenClassName, visibleText } from '../../src/views/token-kinds.js';
import type { InspectorApi } from './api.js';

const tokenPageSize = 2000;
const versionPalette = 6;

interface Tooltip {
  x: number;
  y: number;
  token: TokenRow;
}

function versionBand(segment: SegmentDetail, version: string | null): string {
  if (version === null || version === '-1') return '';
  const versions = [...new Set(segment.versionSpans.map((span) => span.version).filter((v) => v !== '-1'))];
  return ` version-band-${versions.indexOf(version) % versionPalette}`;
}

function SegmentTokens(props: {
  api: InspectorApi;
  sessionId: string;
  view: string;
  position: number;
  segment: SegmentDetail;
  onHover: (tooltip: Tooltip | null) => void;
}) {
  const { api, sessionId, view, position, segment, onHover } = props;
  const [tokens, setTokens] = useState<TokenRow[]>([]);
  const [total, setTotal] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  const stream = useRef<HTMLDivElement>(null);

  const load = (offset: number) =>
    api.tokens(sessionId, view, position, offset, tokenPageSize).then(
      (page) => {
        setTotal(page.total);
        setTokens((previous) => (offset === 0 ? page.tokens : [...previous, ...page.tokens]));
      },
      (failure: Error) => setError(failure.message),
    );

  useEffect(() => {
    load(0);
  }, [sessionId, view, position]);

  const spanStarts = new Set(segment.versionSpans.map((span) => span.start));
  // One delegated listener per segment instead of one per token (segments can hold 30k tokens).
  useEffect(() => {
    const element = stream.current;
    if (!element) return;
    const pointAt = (event: Event) => {
      const target = (event.target as HTMLElement).closest<HTMLElement>('.token');
      const token = target ? tokens[Number(target.dataset.offset)] : undefined;
      if (!target || !token) return;
      const box = target.getBoundingClientRect();
      onHover({ x: box.left, y: box.bottom + 4, token });
    };
    const leave = () => onHover(null);
    element.addEventListener('mouseover', pointAt);
    element.addEventListener('mouseleave', leave);
    return () => {
      element.removeEventListener('mouseover', pointAt);
      element.removeEventListener('mouseleave', leave);
    };
  }, [tokens, onHover]);

  return (
    <div class="token-stream" ref={stream} data-segment={segment.index}>
      {tokens.map((token, offset) => (
        <span
          key={token.position}
          class={`${tokenClassName(token.kind)}${versionBand(segment, token.version)}${
            spanStarts.has(token.position) && token.position > 0 ? ' version-start' : ''
          }`}
          data-offset={offset}
          data-position={token.position}
          data-id={token.id}
          data-kind={token.kind}
          data-mask={token.mask}
          data-logprob={token.logprob}
          data-version={token.version ?? ''}
        >
          {visibleText(token.text)}
        </span>
      ))}
      {error ? <div class="error">{error}</div> : null}
      {total !== null && tokens.length < total ? (
        <button type="button" class="more" onClick={() => load(tokens.length)}>
          load {Math.min(tokenPageSize, total - tokens.length)} more of {total - tokens.length} tokens
        </button>
      ) : null}
    </div>
  );
}

function messageText(message: unknown): string {
  if (typeof message !== 'object' || message === null) return String(message);
  const { content, tool_calls: toolCalls, reasoning_content: reasoning } = message as Record<string, unknown>;
  const parts: string[] = [];
  if (typeof reasoning === 'string' && reasoning !== '') parts.push(`[reasoning] ${reasoning}`);
  if (typeof content === 'string') parts.push(content);
  else if (content !== undefined && content !== null) parts.push(JSON.stringify(content, null, 1));
  if (Array.isArray(toolCalls)) parts.push(...toolCalls.map((call) => `[tool call] ${JSON.stringify(call)}`));
  return parts.join('\n');
}

function Messages({ messages }: { messages: unknown[] }) {
  return (
    <ol class="messages">
      {messages.map((message, index) => {
        const role = (message as { role?: unknown })?.role;
        return (
          <li key={index} class={`message role-${typeof role === 'string' ? role : 'unknown'}`}>
            <div class="role">{typeof role === 'string' ? role : '?'}</div>
            <pre>{messageText(message)}</pre>
          </li>
        );
      })}
    </ol>
  );
}

function formatLogprob(value: number): string {
  return value === 0 ? '0' : value.toFixed(4);
}

/** One session: each segment's tokens in place, its boundary and version spans, and the messages. */
export function SessionView({ api, sessionId }: { api: InspectorApi; sessionId: string }) {
  const [view, setView] = useState<string | null>(null);
  const [detail, setDetail] = useState<SessionDetail | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tooltip, setTooltip] = useState<Tooltip | null>(null);
  const [selected, setSelected] = useState(0);

  useEffect(() => {
    api.session(sessionId, view).then(setDetail, (failure: Error) => setError(failure.message));
  }, [api, sessionId, view]);

  if (error) return <main class="session-page error">{error}</main>;
  if (!detail) return <main class="session-page">loading…</main>;
  const { session } = detail;
  const messagesOf = detail.segments[selected] ?? detail.segments.at(-1);
  const jsonUrl = api.exportUrl(session.id, 'json');
  const htmlUrl = api.exportUrl(session.id, 'html');

  return (
    <main class="session-page">
      <section class="session-summary">
        <h1 data-session-id={session.id}>{session.id}</h1>
        <dl>
          <dt>instance</dt>
          <dd>{session.instanceId ?? '—'}</dd>
          <dt>reward</dt>
          <dd>{session.reward ?? '—'}</dd>
          <dt>status</dt>
          <dd class={`status-${session.status}`}>
            {session.status}
            {session.removed ? ' (removed)' : ''}
          </dd>
          {session.step !== null ? (
            <>
              <dt>step</dt>
              <dd>{session.step}</dd>
            </>
          ) : null}
          <dt>segments</dt>
          <dd>{detail.segments.length}</dd>
        </dl>
        {detail.errors && detail.errors.length > 0 ? (
          <div class="session-errors">
            <h2>errors</h2>
            <ul>
              {detail.errors.map((failure, position) => (
                <li key={position}>
                  <code>{String(failure.code)}</code> in {String(failure.where)} (step{' '}
                  {Number(failure.step) + 1}, retry {String(failure.retry)}): {String(failure.message)}
                </li>
              ))}
            </ul>
          </div>
        ) : null}
        <div class="actions">
          {detail.views.length > 1
            ? detail.views.map((name) => (
                <button
                  type="button"
                  key={name}
                  class={name === detail.view ? 'active' : ''}
                  onClick={() => {
                    setSelected(0);
                    setView(name);
                  }}
                >
                  {name} view
                </button>
              ))
            : null}
          {jsonUrl ? (
            <a class="export" href={jsonUrl} download>
              export JSON
            </a>
          ) : null}
          {htmlUrl ? (
            <a class="export" href={htmlUrl} download>
              export HTML
            </a>
          ) : null}
        </div>
        <div class="legend">
          <span class="token token-trainable">trainable</span>
          <span class="token token-context">context</span>
          <span class="token token-tool">tool result</span>
        </div>
      </section>
      <div class="columns">
        <section class="segments">
          {detail.segments.map((segment, position) => (
            <article
              class={`segment${position === selected ? ' selected' : ''}`}
              key={`${detail.view}-${segment.index}`}
            >
              <div
                class="segment-boundary"
                data-segment={segment.index}
                data-reason={segment.reason ?? ''}
                data-reasons={segment.reasons.join(',')}
              >
                <strong>
                  segment {segment.index} ({segment.view})
                </strong>
                <span class="reason">reason: {segment.reason ?? '—'}</span>
                {segment.reasons.length > 1 ? (
                  <span class="reason">({segment.reasons.join(', ')})</span>
                ) : null}
                <button type="button" class="show-messages" onClick={() => setSelected(position)}>
                  messages
                </button>
                <span class="muted">
                  {segment.tokenCount} tokens · {segment.trainableCount} trainable
                  {segment.finishReason ? ` · finish ${segment.finishReason}` : ''}
                </span>
              </div>
              {segment.versionSpans.length > 0 ? (
                <ul class="version-spans">
                  {segment.versionSpans.map((span) => (
                    <li
                      key={span.start}
                      class={`version-span${versionBand(segment, span.version)}`}
                      data-version={span.version}
                      data-start={span.start}
                      data-end={span.end}
                    >
                      {span.version === '-1' ? 'context' : `v${span.version}`} [{span.start}, {span.end})
                    </li>
                  ))}
                </ul>
              ) : null}
              <SegmentTokens
                api={api}
                sessionId={session.id}
                view={detail.view}
                position={position}
                segment={segment}
                onHover={setTooltip}
              />
            </article>
          ))}
        </section>
        <aside class="side">
          <h2>messages{messagesOf ? ` (segment ${messagesOf.index})` : ''}</h2>
          {messagesOf ? <Messages messages={messagesOf.messages} /> : null}
        </aside>
      </div>
      {tooltip ? (
        <div id="token-tooltip" class="tooltip" style={{ left: `${tooltip.x}px`, top: `${tooltip.y}px` }}>
          <div>
            id <b data-field="id">{tooltip.token.id}</b> · position {tooltip.token.position}
          </div>
          <div>
            text <code>{JSON.stringify(tooltip.token.text)}</code>
          </div>
          <div>
            logprob <b data-field="logprob">{formatLogprob(tooltip.token.logprob)}</b>
          </div>
          <div>
            version <b data-field="version">{tooltip.token.version ?? 'n/a'}</b>
          </div>
          <div>
            {tooltip.token.kind} · mask {tooltip.token.mask}
          </div>
        </div>
      ) : null}
    </main>
  );
}
