import { createSample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import {
  builtinRewards,
  constantReward,
  containsLabelReward,
  exactMatchReward,
  metadataScoreReward,
} from './builtins.js';

describe('exact_match', () => {
  it('compares trimmed response and label', () => {
    expect(exactMatchReward(createSample({ response: '  42\n', label: '42 ' }))).toBe(1);
    expect(exactMatchReward(createSample({ response: '420', label: '42' }))).toBe(0);
  });
  it('scores an empty or missing label 0, even against an empty response', () => {
    expect(exactMatchReward(createSample({ response: '', label: '' }))).toBe(0);
    expect(exactMatchReward(createSample({ response: '' }))).toBe(0);
  });
  it('falls back to metadata.label and stringifies non-string labels', () => {
    expect(exactMatchReward(createSample({ response: 'yes', metadata: { label: 'yes' } }))).toBe(1);
    expect(exactMatchReward(createSample({ response: '7', label: 7 }))).toBe(1);
  });
});

describe('contains_label', () => {
  it('is 1 when the label occurs in the response', () => {
    expect(containsLabelReward(createSample({ response: 'the answer is 42.', label: '42' }))).toBe(1);
    expect(containsLabelReward(createSample({ response: 'the answer is 4', label: '42' }))).toBe(0);
  });
  it('scores an empty label 0', () => {
    expect(containsLabelReward(createSample({ response: 'anything', label: '' }))).toBe(0);
  });
  it('is the default reward', () => {
    expect(builtinRewards.default).toBe(containsLabelReward);
  });
});

describe('constant and metadata_score', () => {
  it('reads metadata.constant_reward, default 0', () => {
    expect(constantReward(createSample({ metadata: { constant_reward: 0.25 } }))).toBe(0.25);
    expect(constantReward(createSample())).toBe(0);
  });
  it('reads metadata.reward, then metadata.score, then 0', () => {
    expect(metadataScoreReward(createSample({ metadata: { reward: 0.5, score: 0.9 } }))).toBe(0.5);
    expect(metadataScoreReward(createSample({ metadata: { score: '0.9' } }))).toBe(0.9);
    expect(metadataScoreReward(createSample({ metadata: { score: 'high' } }))).toBe(0);
    expect(metadataScoreReward(createSample())).toBe(0);
  });
});
