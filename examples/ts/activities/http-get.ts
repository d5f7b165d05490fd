// `http-get` in TypeScript: an activity that GETs a URL with fetch() (StarlingMonkey's fetch
// goes through wasi:http/outgoing-handler, which the host allows only to the component's
// `allowed_hosts`) and returns status and body — examples/activities/http-get (Rust).
import type * as Client from "weir-examples:http/client";

const MAX_BODY = 1 << 20;

async function get(url: string): Promise<Client.HttpResponse> {
  let response: Response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw `GET ${url} failed: ${e}`;
  }
  const body = new Uint8Array(await response.arrayBuffer());
  if (body.length > MAX_BODY) {
    throw `the body of ${url} is over ${MAX_BODY} bytes`;
  }
  return { status: response.status, body: new TextDecoder().decode(body) };
}

// componentize-js runs the event loop until an exported function's promise settles.
export const client = { get };
