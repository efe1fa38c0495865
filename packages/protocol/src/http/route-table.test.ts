import { describe, expect, it } from 'vitest';
import { DressageError } from '../errors.js';
import { decodePathParameter, RouteTable, requestPath } from './route-table.js';

describe('requestPath', () => {
  it('drops the query and trailing slashes', () => {
    expect(requestPath('/v1/models?x=1')).toBe('/v1/models');
    expect(requestPath('/v1/models///')).toBe('/v1/models');
    expect(requestPath('/v1/models/?a=/b/')).toBe('/v1/models');
    expect(requestPath('/')).toBe('/');
    expect(requestPath('//')).toBe('/');
    expect(requestPath('')).toBe('/');
    expect(requestPath(undefined)).toBe('/');
    expect(requestPath('/?q')).toBe('/');
  });
});

describe('RouteTable', () => {
  const table = new RouteTable<string>()
    .add('GET', '/health', 'health')
    .add(['GET', 'HEAD'], '/v1/models', 'models')
    .add('POST', '/v1/chat/completions', 'chat')
    .add('POST', '/s/{session}/v1/chat/completions', 'session chat')
    .add('GET', '/v1/sessions/{session}', 'session')
    .add('GET', '/v1/sessions/{session}/turns/{turn}', 'turn')
    .add('POST', '/v1/sessions/{session}/turns/{turn}/cancel', 'cancel')
    .add('GET', '/v1/sessions/current', 'current');

  it('finds literal routes by method and path', () => {
    expect(table.lookup('POST', '/v1/chat/completions')).toEqual({
      kind: 'found',
      handler: 'chat',
      parameters: {},
    });
    expect(table.lookup('HEAD', '/v1/models')).toMatchObject({ kind: 'found', handler: 'models' });
  });

  it('captures and decodes path parameters', () => {
    expect(table.lookup('POST', '/s/rollout%3A7/v1/chat/completions')).toEqual({
      kind: 'found',
      handler: 'session chat',
      parameters: { session: 'rollout:7' },
    });
    expect(table.lookup('POST', '/v1/sessions/a/turns/t-1/cancel')).toEqual({
      kind: 'found',
      handler: 'cancel',
      parameters: { session: 'a', turn: 't-1' },
    });
    // An encoded slash stays inside its segment.
    expect(table.lookup('GET', '/v1/sessions/a%2Fb')).toMatchObject({ parameters: { session: 'a/b' } });
  });

  it('prefers a literal path over a pattern that also matches', () => {
    expect(table.lookup('GET', '/v1/sessions/current')).toMatchObject({ handler: 'current' });
    expect(table.lookup('GET', '/v1/sessions/other')).toMatchObject({ handler: 'session' });
  });

  it('answers not_found for an unknown path and method_not_allowed for a known one', () => {
    expect(table.lookup('GET', '/v1/nothing')).toEqual({ kind: 'not_found' });
    expect(table.lookup('POST', '/v1/sessions/a/turns')).toEqual({ kind: 'not_found' });
    // A parameter never matches an empty segment.
    expect(table.lookup('GET', '/v1/sessions/')).toEqual({ kind: 'not_found' });
    expect(table.lookup('GET', '/s//v1/chat/completions')).toEqual({ kind: 'not_found' });
    expect(table.lookup('GET', '/v1/chat/completions')).toEqual({
      kind: 'method_not_allowed',
      allowed: ['POST'],
    });
    expect(table.lookup('DELETE', '/v1/models')).toEqual({
      kind: 'method_not_allowed',
      allowed: ['GET', 'HEAD'],
    });
    expect(table.lookup('GET', '/v1/sessions/a/turns/t/cancel')).toEqual({
      kind: 'method_not_allowed',
      allowed: ['POST'],
    });
  });

  it('refuses a malformed escape in a parameter as a 400 naming it', () => {
    let thrown: unknown;
    try {
      table.lookup('POST', '/s/%E0%A4%A/v1/chat/completions');
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(DressageError);
    expect((thrown as DressageError).httpStatus).toBe(400);
    expect((thrown as DressageError).message).toContain('session');
    expect((thrown as DressageError).details).toEqual({ parameter: 'session', value: '%E0%A4%A' });
  });

  it('decodes only the parameters of the route that matched, with the table own decoder', () => {
    const seen: string[] = [];
    const strict = new RouteTable<string>({
      decodeParameter: (raw, name) => {
        seen.push(`${name}=${raw}`);
        if (!/^[a-z]+$/.test(raw))
          throw new DressageError({ code: 'invalid_argument', message: `bad ${name}` });
        return raw.toUpperCase();
      },
    }).add('GET', '/items/{item}', 'item');
    expect(strict.lookup('GET', '/items/abc')).toMatchObject({ parameters: { item: 'ABC' } });
    expect(strict.lookup('POST', '/items/a%ZZ')).toEqual({ kind: 'method_not_allowed', allowed: ['GET'] });
    expect(() => strict.lookup('GET', '/items/a%ZZ')).toThrow('bad item');
    expect(seen).toEqual(['item=abc', 'item=a%ZZ']);
  });

  it('refuses malformed patterns and a route added twice', () => {
    const routes = new RouteTable<number>().add('GET', '/a/{id}', 1);
    expect(() => routes.add('GET', 'a', 2)).toThrow('must start with /');
    expect(() => routes.add('GET', '/a/x{id}', 2)).toThrow('whole segment');
    expect(() => routes.add('GET', '/a/{id}/{id}', 2)).toThrow('appears twice');
    expect(() => routes.add('GET', '/a/{id}', 2)).toThrow('already routed');
    expect(() => routes.add('POST', '/a/{id}', 2)).not.toThrow();
    expect(routes.lookup('POST', '/a/7')).toMatchObject({ handler: 2, parameters: { id: '7' } });
  });
});

describe('decodePathParameter', () => {
  it('decodes escapes and leaves plain segments as they are', () => {
    expect(decodePathParameter('plain-id', 'id')).toBe('plain-id');
    expect(decodePathParameter('a%20b', 'id')).toBe('a b');
    expect(() => decodePathParameter('%ZZ', 'id')).toThrow('Malformed %-encoding in the path parameter id');
  });
});
