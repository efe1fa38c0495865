import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { createApi, embeddedSessionId } from './api.js';
import { SessionList } from './session-list.js';
import { SessionView } from './session-view.js';
import './styles.css';

const api = createApi();
const standaloneId = embeddedSessionId();

// Hash routes: `#/` is the list, `#/session/<id>` a session (bookmarkable, works from file://).
function currentSession(): string | null {
  if (standaloneId !== null) return standaloneId;
  const match = /^#\/session\/(.+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]!) : null;
}

function App() {
  const [sessionId, setSessionId] = useState(currentSession);
  useEffect(() => {
    const onChange = () => setSessionId(currentSession());
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return (
    <div class="app">
      <header class="topbar">
        <a class="brand" href="#/">
          dressage inspect
        </a>
        {api.standalone ? <span class="muted">standalone export</span> : null}
      </header>
      {sessionId === null ? (
        <SessionList api={api} />
      ) : (
        <SessionView api={api} sessionId={sessionId} key={sessionId} />
      )}
    </div>
  );
}

render(<App />, document.getElementById('app')!);
