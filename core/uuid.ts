/**
 * GPU UUIDs: parsing the text forms users write and formatting the form nvidia-smi prints.
 *
 * @module
 */

import { describeValue } from "./errors.ts";

const BARE = /^[0-9a-fA-F]{32}$/;
const DASHED = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * Parses a GPU UUID written as nvidia-smi prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`),
 * without the `GPU-` prefix (as cuda.core's `Device.uuid` gives it), or as 32 bare hex digits.
 * Returns the 16 raw bytes of a `CUuuid`.
 *
 * @throws {TypeError} when the value is not a string.
 * @throws {RangeError} naming the value and the forms accepted, when it is in none of them.
 */
export function parseGpuUuid(text: unknown, what = "GPU UUID"): Uint8Array {
  if (typeof text !== "string") {
    throw new TypeError(
      `${what} must be a string such as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", got ${
        describeValue(text)
      }`,
    );
  }
  const body = text.startsWith("GPU-") ? text.slice(4) : text;
  if (!BARE.test(body) && !DASHED.test(body)) {
    const hint = text.startsWith("MIG-")
      ? " (MIG instance UUIDs cannot be remapped; give the UUID of the whole GPU)"
      : "";
    throw new RangeError(
      `${what} ${
        JSON.stringify(text)
      } is not a GPU UUID: expected "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or 32 hex digits${hint}`,
    );
  }
  const hex = body.replaceAll("-", "");
  const bytes = new Uint8Array(16);
  for (let i = 0; i < 16; i++) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

/** Formats 16 raw `CUuuid` bytes as nvidia-smi prints them: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
export function formatGpuUuid(bytes: Uint8Array): string {
  if (bytes.length !== 16) {
    throw new RangeError(`a CUuuid has 16 bytes, got ${bytes.length}`);
  }
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${
    hex.slice(20)
  }`;
}
