import type {
  InspectorInfo,
  SessionDetail,
  SessionExport,
  SessionPage,
  TokenPage,
} from '../../src/views/api-types.js';

/** Where the page reads its data: the inspector server, or the data inlined in a standalone export. */
export interface InspectorApi {
  standalone: boolean;
  info(): Promise<InspectorInfo>;
  sessions(query: URLSearchParams): Promise<SessionPage>;
  session(id: string, view: string | null): Promise<SessionDetail>;
  tokens(id: string, view: string, segment: number, offset: number, limit: number): Promise<TokenPage>;
  exportUrl(id: string, format: 'json' | 'html'): string | null;
}

async function getJson<T>(path: string): Promise<T> {
  const response = await fetch(path);
  if (!response.ok) {
    const body = (await response.json().catch(() => ({}))) as { message?: string };
    throw new Error(body.message ?? `${response.status} ${response.statusText}`);
  }
  return (await response.json()) as T;
}

const encode = encodeURIComponent;

function serverApi(): InspectorApi {
  return {
    standalone: false,
    info: () => getJson('api/info'),
    sessions: (query) => getJson(`api/sessions?${query}`),
    session: (id, view) => getJson(`api/sessions/${encode(id)}${view ? `?view=${encode(view)}` : ''}`),
    tokens: (id, view, segment, offset, limit) =>
      getJson(
        `api/sessions/${encode(id)}/segments/${segment}/tokens?view=${encode(view)}&offset=${offset}&limit=${limit}`,
      ),
    exportUrl: (id, format) => `api/sessions/${encode(id)}/export.${format}`,
  };
}

function embeddedApi(data: SessionExport): InspectorApi {
  const detailOf = (view: string | null) =>
    data.details.find((detail) => detail.view === view) ?? data.details[0]!;
  return {
    standalone: true,
    info: async () => ({ kind: 'file', path: 'standalone export', sessionCount: 1, details: {} }),
    sessions: async () => ({ total: 0, offset: 0, limit: 0, items: [] }),
    session: async (_id, view) => {
      const detail = detailOf(view);
      return { ...detail, segments: detail.segments.map(({ tokens: _tokens, ...segment }) => segment) };
    },
    tokens: async (_id, view, segment, offset, limit) => {
      const tokens = detailOf(view).segments[segment]?.tokens ?? [];
      return { total: tokens.length, offset, tokens: tokens.slice(offset, offset + limit) };
    },
    exportUrl: () => null,
  };
}

/** Picks the embedded data when the page is a standalone export, else the server. */
export function createApi(): InspectorApi {
  const element = document.getElementById('inspector-data');
  if (element?.textContent) return embeddedApi(JSON.parse(element.textContent) as SessionExport);
  return serverApi();
}

/** The id of the only session of a standalone export. */
export function embeddedSessionId(): string | null {
  const element = document.getElementById('inspector-data');
  if (!element?.textContent) return null;
  const data = JSON.parse(element.textContent) as SessionExport;
  return data.details[0]?.session.id ?? null;
}
