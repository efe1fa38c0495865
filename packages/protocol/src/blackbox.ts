// The BlackboxServer's wire formats (`@dressage/protocol/blackbox`): its responses, turn and session
// states, and error body, as the reference's clients read them. Kept out of the main entry, which
// holds what every package speaks, since only the BlackboxServer and its clients use them.

export * from './schemas/blackbox-responses.js';
