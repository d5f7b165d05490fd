// Loaded with `node --import` before jco. jco's tools (wasm-tools, the componentize-js
// splicer) are themselves components, run on @bytecodealliance/preview2-shim, which since
// 0.26 gives a guest no preopened directory: without one they cannot read the WIT or the
// sources ("failed to get path metadata ... (os error 44)"). This preopens the directories
// named in WEIR_JCO_PREOPENS (colon-separated) in every copy of the shim that
// WEIR_JCO_SHIMS (colon-separated paths of `lib/nodejs/filesystem.js` or
// `dist/nodejs/filesystem.js`) names; examples/ts/build.sh finds both.
const shims = (process.env.WEIR_JCO_SHIMS ?? "").split(":").filter(Boolean);
const dirs = (process.env.WEIR_JCO_PREOPENS ?? "").split(":").filter(Boolean);
const preopens = Object.fromEntries(dirs.map((d) => [d, d]));
for (const shim of shims) {
  const filesystem = await import(shim);
  filesystem._setPreopens(preopens);
}
