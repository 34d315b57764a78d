/**
 * Where this package's worker scripts are (the Bun driver's `ffi/bun_worker`, the digests'
 * `os/digest_worker`), however it was delivered: as TypeScript, as JavaScript, or inside one
 * executable (`bun build --compile`, `cli/build.sh`).
 *
 * @module
 */

/**
 * The worker script `<folder>/<name>` beside the module at `moduleUrl` (which lies in `folder`),
 * with that module's extension (`.js` where the package was delivered as JavaScript). In a
 * standalone executable, whose modules all have its URL (`file:///$bunfs/root/<name>`), it is the
 * build's entry point `<folder>/<name>.ts`, kept as `<folder>/<name>.js` under the build's root.
 */
export function workerScript(moduleUrl: string, folder: string, name: string): URL {
  const { pathname } = new URL(moduleUrl);
  if (pathname.startsWith("/$bunfs/")) return new URL(`./${folder}/${name}.js`, moduleUrl);
  return new URL(`./${name}${/\.[cm]?js$/.exec(pathname)?.[0] ?? ".ts"}`, moduleUrl);
}
