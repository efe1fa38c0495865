// The receiving side of the transfer benchmark, in its own process so sender and receiver do not share
// an event loop: a TrainerService server that reassembles each batch and answers, and a raw TCP sink
// that copies the same bytes into a preallocated buffer (8-byte little-endian length, payload, 1-byte ack).
// It imports the server module only, as a process that serves TrainerService would (no TensorFlow.js).
import { createServer } from 'node:net';
import { startTrainerServer } from '../src/trainer-server.js';

const trainer = await startTrainerServer({
  getInfo: () => ({ trainer_kind: 'sink' }),
  train: (_header, batch) => ({ samples_trained: batch.sample_count, tokens_trained: batch.tokens.length }),
  updateWeights: () => ({}),
  saveCheckpoint: () => ({}),
  loadCheckpoint: () => ({}),
});

let buffer = Buffer.alloc(0);
const raw = createServer((socket) => {
  let expected = -1;
  let received = 0;
  let header = Buffer.alloc(0);
  socket.on('data', (data: Buffer) => {
    let offset = 0;
    while (offset < data.length) {
      if (expected < 0) {
        const take = Math.min(8 - header.length, data.length - offset);
        header = Buffer.concat([header, data.subarray(offset, offset + take)]);
        offset += take;
        if (header.length < 8) return;
        expected = Number(header.readBigUInt64LE(0));
        if (buffer.length < expected) buffer = Buffer.alloc(expected);
        received = 0;
      }
      const take = Math.min(expected - received, data.length - offset);
      data.copy(buffer, received, offset, offset + take);
      received += take;
      offset += take;
      if (received === expected) {
        socket.write(Buffer.from([1]));
        expected = -1;
        header = Buffer.alloc(0);
      }
    }
  });
});
await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve));
const address = raw.address();
console.log(`grpc ${trainer.port} raw ${typeof address === 'object' && address ? address.port : 0}`);
// Stop with the parent.
process.stdin.resume();
process.stdin.on('end', async () => {
  raw.close();
  await trainer.close(100);
  process.exit(0);
});
