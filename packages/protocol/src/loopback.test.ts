import { describe, expect, it } from 'vitest';
import { hostHeaderName, isLoopbackAddress, reachableHost } from './loopback.js';

describe('loopback', () => {
  it('tells loopback addresses from others', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', 'app.localhost']) {
      expect(isLoopbackAddress(host), host).toBe(true);
    }
    for (const host of ['0.0.0.0', '::', '10.0.0.2', 'example.com', 'localhost.evil.com', '128.0.0.1']) {
      expect(isLoopbackAddress(host), host).toBe(false);
    }
  });

  it('takes the name out of a Host header', () => {
    expect(hostHeaderName('127.0.0.1:8080')).toBe('127.0.0.1');
    expect(hostHeaderName('localhost')).toBe('localhost');
    expect(hostHeaderName('[::1]:80')).toBe('::1');
    expect(hostHeaderName('evil.com:80')).toBe('evil.com');
    expect(hostHeaderName('[::1')).toBeNull();
    expect(hostHeaderName('a:b')).toBeNull();
    expect(hostHeaderName(undefined)).toBeNull();
  });

  it('gives the reachable address of a listen host', () => {
    expect(reachableHost('0.0.0.0')).toBe('127.0.0.1');
    expect(reachableHost('::')).toBe('[::1]');
    expect(reachableHost('::1')).toBe('[::1]');
    expect(reachableHost('10.0.0.2')).toBe('10.0.0.2');
  });
});
