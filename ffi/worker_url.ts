/**
 * Where a worker thread's script is, beside the module that starts it.
 *
 * @module
 */

/**
 * The worker script `name` (`bun_worker`) in the folder `folder` (`ffi`) of the module at
 * `moduleUrl`, which lies in that folder, with the module's extension (`.js` where the package was
 * delivered as JavaScript). In a standalone executable (`bun build --compile`, whose modules all
 * have the executable's URL, `file:///$bunfs/root/<name>`) it is the entry point
 * `<folder>/<name>.ts`, kept as `<folder>/<name>.js` under the build's root (`cli/build.sh`).
 */
export function scriptBeside(moduleUrl: string, folder: string, name: string): URL {
  if (new URL(moduleUrl).pathname.startsWith("/$bunfs/")) {
    return new URL(`./${folder}/${name}.js`, moduleUrl);
  }
  const ext = /\.[cm]?js$/.exec(new URL(moduleUrl).pathname)?.[0] ?? ".ts";
  return new URL(`./${name}${ext}`, moduleUrl);
}
