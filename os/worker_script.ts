// Where this package's worker scripts are (`ffi/bun_worker`, `os/digest_worker`), however it was
// delivered: as TypeScript, as JavaScript, or inside one executable (`cli/build.sh`).

/**
 * The worker script `<folder>/<name>` beside the module at `moduleUrl` (in `folder`), with its
 * extension; in an executable (all modules at `file:///$bunfs/root/<name>`), the build's entry
 * point, kept as `<folder>/<name>.js` under the build's root.
 */
export function workerScript(moduleUrl: string, folder: string, name: string): URL {
  const { pathname } = new URL(moduleUrl);
  if (pathname.startsWith("/$bunfs/")) return new URL(`./${folder}/${name}.js`, moduleUrl);
  return new URL(`./${name}${/\.[cm]?js$/.exec(pathname)?.[0] ?? ".ts"}`, moduleUrl);
}
