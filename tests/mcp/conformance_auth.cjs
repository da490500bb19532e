// Preloaded into the MCP conformance suite (node --require): its requests carry the
// daemon's token, which the suite has no option for. Only requests to the server under
// test (MESH_CONFORMANCE_ORIGIN) get it, so nothing else ever sees the token.
"use strict";
const token = process.env.MESH_TOKEN;
const origin = process.env.MESH_CONFORMANCE_ORIGIN;

function urlOf(input) {
  if (typeof input === "string") return input;
  return input instanceof URL ? input.href : input.url;
}

if (token && origin) {
  const bearer = `Bearer ${token}`;
  const fetch = globalThis.fetch;
  globalThis.fetch = (input, init = {}) => {
    if (!urlOf(input).startsWith(origin)) return fetch(input, init);
    const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
    if (!headers.has("authorization")) headers.set("authorization", bearer);
    return fetch(input, { ...init, headers });
  };
  // The DNS-rebinding scenario posts with undici's request (a Host header fetch forbids).
  const undici = require(require.resolve("undici", { paths: [process.cwd()] }));
  const request = undici.request;
  undici.request = (url, options = {}) => {
    if (!urlOf(url).startsWith(origin)) return request(url, options);
    const headers = { authorization: bearer, ...(options.headers ?? {}) };
    return request(url, { ...options, headers });
  };
}
