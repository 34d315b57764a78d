// The chunked SHA-256 of simulated memory (mock/memory.ts): a MemoryImage's cached, incremental
// value always equals the same hash computed over its bytes from scratch, whatever was written,
// rewritten, saved or loaded in between; the incremental hasher (examples/_chunked_sha256.ts)
// gives one value for any piece sizes; and the value is the one its documentation defines.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { ChunkedSha256, chunkedSha256 } from "../examples/_chunked_sha256.ts";
import { HASH_CHUNK_SIZE, MemoryImage, PAGE_SIZE } from "../mock/memory.ts";

const MIB = 2 ** 20;

/** The definition, written out with plain SHA-256s: the hash of the chunks' digests in order. */
function byDefinition(bytes: Uint8Array): string {
  const outer = createHash("sha256");
  for (let at = 0; at < bytes.length; at += HASH_CHUNK_SIZE) {
    outer.update(createHash("sha256").update(bytes.subarray(at, at + HASH_CHUNK_SIZE)).digest());
  }
  return outer.digest("hex");
}

/** Its hash, checked against the hash of everything it reads back. */
function checked(m: MemoryImage, label: string): string {
  const hash = m.chunkedSha256();
  assert.match(hash, /^[0-9a-f]{64}$/, label);
  assert.equal(hash, chunkedSha256(m.read(0, m.size)), label);
  return hash;
}

/** A small deterministic generator (mulberry32), so that a failure can be run again. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

function pattern(length: number, salt: number): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (i * 31 + salt) % 255 + 1);
}

const SIZES: [string, number][] = [
  ["smaller than a chunk", 1000],
  ["exactly one chunk", MIB],
  ["exactly three chunks", 3 * MIB],
  ["not a multiple of the chunk", 3 * MIB + 12_345],
  ["a page more than two chunks", 2 * MIB + PAGE_SIZE],
];

describe("the definition", () => {
  test("HASH_CHUNK_SIZE is 1 MiB and a whole number of pages", () => {
    assert.equal(HASH_CHUNK_SIZE, MIB);
    assert.equal(HASH_CHUNK_SIZE % PAGE_SIZE, 0);
  });

  test("chunkedSha256 is the SHA-256 of the chunks' SHA-256s, for short and long inputs", () => {
    for (const length of [0, 1, 1000, MIB - 1, MIB, MIB + 1, 3 * MIB, 3 * MIB + 12_345]) {
      const bytes = pattern(length, length);
      assert.equal(chunkedSha256(bytes), byDefinition(bytes), `${length} bytes`);
    }
    assert.equal(
      chunkedSha256(new Uint8Array(0)),
      createHash("sha256").digest("hex"),
      "no bytes: the SHA-256 of nothing",
    );
  });

  test("it is not the SHA-256 of the bytes, even for one chunk", () => {
    const bytes = pattern(5000, 1);
    assert.notEqual(chunkedSha256(bytes), createHash("sha256").update(bytes).digest("hex"));
  });
});

describe("MemoryImage.chunkedSha256", () => {
  for (const [label, size] of SIZES) {
    test(`${label} (${size} bytes): equals chunkedSha256 of read(0, size) through writes`, () => {
      const m = new MemoryImage(size);
      const zeros = checked(m, "unwritten");
      assert.equal(zeros, chunkedSha256(new Uint8Array(size)));
      const seen = new Set([zeros]);
      // Across chunk borders (where there is one), then a rewrite of the same chunk, then the
      // last byte, each hashed in between so that the cached digests are what is tested.
      const border = Math.min(HASH_CHUNK_SIZE, size) - 3;
      m.write(border, pattern(Math.min(10, size - border), 2));
      seen.add(checked(m, "a write across a chunk border"));
      m.write(border + 1, new Uint8Array([0xee]));
      seen.add(checked(m, "a rewrite of that chunk"));
      m.write(size - 1, new Uint8Array([0x42]));
      seen.add(checked(m, "the last byte"));
      if (size > 2 * MIB) {
        m.write(MIB - PAGE_SIZE, pattern(MIB + 2 * PAGE_SIZE, 3));
        seen.add(checked(m, "a write over a whole chunk and into both neighbours"));
      }
      assert.equal(seen.size, size > 2 * MIB ? 5 : 4, "every write changed the hash");
    });
  }

  test("random writes, hashed now and then, always equal the hash from scratch", () => {
    const next = random(16);
    const size = 4 * MIB + 777;
    const m = new MemoryImage(size);
    for (let step = 0; step < 60; step++) {
      const at = Math.floor(next() * size);
      const length = Math.min(size - at, Math.floor(next() * (next() < 0.2 ? 2 * MIB : 3000)));
      m.write(at, next() < 0.3 ? new Uint8Array(length) : pattern(length, step));
      if (next() < 0.5) checked(m, `step ${step}: ${length} bytes at ${at}`);
    }
    checked(m, "at the end");
  });

  test("no bytes at all: the SHA-256 of nothing", () => {
    assert.equal(new MemoryImage(0).chunkedSha256(), createHash("sha256").digest("hex"));
  });

  test("one byte changed anywhere changes the hash of unwritten memory", () => {
    const size = 3 * MIB + 12_345;
    const zeros = new MemoryImage(size).chunkedSha256();
    for (const at of [0, MIB - 1, MIB, 2 * MIB + 5, 3 * MIB, size - 1]) {
      const m = new MemoryImage(size);
      m.chunkedSha256();
      m.write(at, new Uint8Array([1]));
      assert.notEqual(m.chunkedSha256(), zeros, `byte ${at}`);
      const fresh = new MemoryImage(size);
      fresh.write(at, new Uint8Array([1]));
      assert.equal(fresh.chunkedSha256(), m.chunkedSha256(), `byte ${at}, never hashed before`);
    }
  });

  test("zeros written where nothing was change nothing", () => {
    const m = new MemoryImage(2 * MIB);
    const untouched = m.chunkedSha256();
    m.write(500_000, new Uint8Array(10));
    m.write(MIB - 5, new Uint8Array(PAGE_SIZE));
    assert.equal(m.chunkedSha256(), untouched);
  });

  test("an image built from pages (as a snapshot loads one) hashes as its bytes", () => {
    const page = pattern(PAGE_SIZE, 9);
    const m = MemoryImage.load(2 * MIB + 100, [[3, page], [31, page]]);
    checked(m, "from pages");
    assert.deepEqual(m.read(3 * PAGE_SIZE, PAGE_SIZE), page);
    assert.deepEqual(m.read(31 * PAGE_SIZE, PAGE_SIZE), page);
  });

  describe("saved and loaded again, then written on one side only", () => {
    // Saved with no digest cached yet, with every digest up to date, and with a write since the
    // last hash (a chunk's digest out of date when saved).
    const setups: [string, (m: MemoryImage) => void][] = [
      ["never hashed", (m) => m.write(10, new Uint8Array([1]))],
      ["just hashed", (m) => {
        m.write(10, new Uint8Array([1]));
        m.chunkedSha256();
      }],
      ["written since the last hash", (m) => {
        m.write(10, new Uint8Array([1]));
        m.chunkedSha256();
        m.write(MIB + 10, new Uint8Array([1]));
      }],
    ];
    for (const [label, setup] of setups) {
      test(`${label}: the same bytes and hash, and the other side's hash does not change`, () => {
        const m = new MemoryImage(3 * MIB + 5);
        setup(m);
        m.write(3 * MIB, new Uint8Array([0, 0, 9, 0])); // a short last chunk, zeros around
        const c = MemoryImage.load(m.size, m.save());
        const both = checked(c, "the copy");
        assert.equal(checked(m, "the original"), both);
        assert.deepEqual(c.read(0, c.size), m.read(0, m.size));

        m.write(10, new Uint8Array([2]));
        m.write(MIB + 10, new Uint8Array([3]));
        assert.notEqual(checked(m, "the original, written"), both);
        assert.equal(checked(c, "the copy, untouched"), both);
        assert.equal(c.read(10, 1)[0], 1);

        c.write(2 * MIB, new Uint8Array([4]));
        const original = m.chunkedSha256();
        assert.notEqual(checked(c, "the copy, written"), both);
        assert.equal(checked(m, "the original, untouched"), original);
      });
    }
  });

  describe("a kernel's output, made when needed (produce)", () => {
    const byteOf = (i: number, salt: number) => (i * 7 + salt) % 256;
    /** An output that counts the chunks it made: its byte i is byteOf(i, salt). */
    function output(salt: number) {
      const made = { count: 0 };
      const make = (from: number, out: Uint8Array) => {
        made.count++;
        for (let i = 0; i < out.length; i++) out[i] = byteOf(from + i, salt);
      };
      return { made, make };
    }

    test("against a plain array: random outputs and writes, read, hashed, saved and loaded", () => {
      const next = random(32);
      const size = 5 * MIB + 4321;
      const m = new MemoryImage(size), model = new Uint8Array(size);
      for (let step = 0; step < 40; step++) {
        const aligned = next() < 0.4;
        const at = aligned ? Math.floor(next() * 5) * MIB : Math.floor(next() * size);
        const length = Math.min(size - at, Math.floor(next() * 3 * MIB));
        if (next() < 0.6) {
          const { make } = output(step);
          m.produce(at, length, make);
          const bytes = new Uint8Array(length);
          make(0, bytes);
          model.set(bytes, at);
        } else {
          const bytes = pattern(Math.min(length, 5000), step);
          m.write(at, bytes);
          model.set(bytes, at);
        }
        const from = Math.floor(next() * size), n = Math.min(size - from, 2 * MIB);
        assert.deepEqual(m.read(from, n), model.subarray(from, from + n), `step ${step}: read`);
        if (next() < 0.4) assert.equal(m.chunkedSha256(), byDefinition(model), `step ${step}`);
      }
      assert.equal(m.chunkedSha256(), byDefinition(model));
      const copy = MemoryImage.load(size, m.save());
      assert.deepEqual(copy.read(0, size), model);
      assert.equal(copy.chunkedSha256(), byDefinition(model));
    });

    test("a whole chunk is made only when read, hashed or written over, and kept only then", () => {
      const m = new MemoryImage(8 * MIB), { made, make } = output(1);
      m.produce(0, 8 * MIB, make);
      assert.equal(made.count, 0, "nothing made by the output itself");
      assert.deepEqual(
        m.read(3 * MIB + 5, 2),
        Uint8Array.of(byteOf(3 * MIB + 5, 1), byteOf(3 * MIB + 6, 1)),
      );
      assert.equal(made.count, 1, "a read makes the chunk it reads");
      m.chunkedSha256();
      assert.equal(made.count, 9, "the hash makes every chunk");
      m.chunkedSha256();
      m.write(5 * MIB + 9, new Uint8Array([0]));
      assert.equal(made.count, 10, "a write makes its chunk, once; a hash again, none");
      m.read(5 * MIB, MIB);
      m.chunkedSha256();
      assert.equal(made.count, 10, "the chunk written over is kept");
      assert.equal(m.read(5 * MIB + 9, 1)[0], 0);
    });

    test("parts of chunks at its ends are made at once", () => {
      const m = new MemoryImage(3 * MIB), { made, make } = output(2);
      m.produce(MIB - 10, MIB + 20, make);
      assert.equal(made.count, 2, "the 10 and 10 bytes in the chunks around the whole one");
      const bytes = new Uint8Array(MIB + 20);
      make(0, bytes);
      assert.deepEqual(m.read(MIB - 10, MIB + 20), bytes);
      assert.deepEqual(m.read(0, MIB - 10), new Uint8Array(MIB - 10), "zeros before");
    });
  });

  test("saved: only the pages that are not all zero, ascending, trailing zeros left out", () => {
    const m = new MemoryImage(3 * MIB);
    m.write(2 * MIB + 5, new Uint8Array([7, 0, 8])); // page 32, its first 5 bytes zero
    m.write(PAGE_SIZE - 1, new Uint8Array([1, 2])); // across pages 0 and 1
    m.write(MIB, new Uint8Array(PAGE_SIZE)); // zeros: a chunk written, no page saved
    const expected = [
      [0, new Uint8Array(PAGE_SIZE).fill(1, PAGE_SIZE - 1)],
      [1, Uint8Array.of(2)],
      [32, Uint8Array.of(0, 0, 0, 0, 0, 7, 0, 8)],
    ];
    const saved = m.save();
    assert.deepEqual(saved.map(([i, b]) => [i, new Uint8Array(b)]), expected);
    // What was saved stays what the memory held then (a dump's images), whatever is written after;
    // and the memory reads what was written, not what was saved.
    m.write(PAGE_SIZE - 1, new Uint8Array([5, 6]));
    m.write(2 * MIB + 5, new Uint8Array(3).fill(9));
    assert.deepEqual(saved.map(([i, b]) => [i, new Uint8Array(b)]), expected);
    assert.deepEqual([...m.read(PAGE_SIZE - 1, 2), ...m.read(2 * MIB + 5, 3)], [5, 6, 9, 9, 9]);
    assert.deepEqual(MemoryImage.load(m.size, saved).read(PAGE_SIZE - 1, 2), Uint8Array.of(1, 2));
  });
});

describe("ChunkedSha256, fed in pieces", () => {
  const bytes = pattern(3 * MIB + 12_345, 5);
  const whole = chunkedSha256(bytes);

  const pieces: [string, (i: number) => number][] = [
    ["1 byte", () => 1],
    ["7 bytes", () => 7],
    ["a page and one", () => PAGE_SIZE + 1],
    ["a chunk less one", () => HASH_CHUNK_SIZE - 1],
    ["a chunk and one", () => HASH_CHUNK_SIZE + 1],
    ["exactly a chunk", () => HASH_CHUNK_SIZE],
    ["empty pieces between odd ones", (i) => (i % 2 ? 0 : 99_991)],
  ];
  for (const [label, size] of pieces) {
    test(`pieces of ${label} give the value of one piece`, () => {
      const hasher = new ChunkedSha256();
      // Only the 1-byte and 7-byte feeds go through a shorter input, to stay quick.
      const input = size(0) < 100 ? bytes.subarray(0, MIB + 3000) : bytes;
      for (let at = 0, i = 0; at < input.length; i++) {
        const n = size(i);
        hasher.update(input.subarray(at, at + n));
        at += n;
      }
      assert.equal(hasher.digest(), input === bytes ? whole : chunkedSha256(input));
    });
  }

  test("random piece sizes give the value of one piece", () => {
    const next = random(7);
    const hasher = new ChunkedSha256();
    for (let at = 0; at < bytes.length;) {
      const n = Math.floor(next() * (next() < 0.5 ? 5000 : 3 * MIB));
      hasher.update(bytes.subarray(at, at + n));
      at += n;
    }
    assert.equal(hasher.digest(), whole);
  });

  test("gives its digest once, takes only a Uint8Array, and returns itself from update", () => {
    const hasher = new ChunkedSha256();
    assert.equal(hasher.update(new Uint8Array(3)), hasher);
    hasher.digest();
    assert.throws(() => hasher.digest(), /has given its digest/);
    assert.throws(() => hasher.update(new Uint8Array(1)), /has given its digest/);
    assert.throws(
      // deno-lint-ignore no-explicit-any
      () => new ChunkedSha256().update("abc" as any),
      (e) => e instanceof TypeError && /bytes must be a Uint8Array, got "abc"/.test(e.message),
    );
  });
});
