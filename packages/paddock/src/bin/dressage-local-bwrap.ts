#!/usr/bin/env node
// dressage-local-bwrap start|status|stop: runs a local bubblewrap sandbox pool in the foreground and
// inspects or stops one started elsewhere through its pool.json state file.
import { runLocalBwrapCli } from '../blackbox/local-bwrap-cli.js';

process.exitCode = await runLocalBwrapCli(process.argv.slice(2));
