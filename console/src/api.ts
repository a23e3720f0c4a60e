// The console's only way to the platform: the public /v1 API, with the session cookie
// the gateway set at sign-in. Changes carry the session's CSRF token.

export interface Principal {
  subject: string;
  userID: string | null;
  keyID: string | null;
  role: "platform-admin" | "tenant-admin" | "tenant-user";
  tenantID: string | null;
  scopes: string[];
}

export interface ConsoleSession {
  csrfToken: string;
  expiresAt: string;
  principal: Principal;
}

interface FieldError {
  loc: (string | number)[];
  msg: string;
}

/** An API answer that was not a success, in words a person can act on. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
    readonly fieldErrors: FieldError[] = [],
  ) {
    super(detail || title);
  }

  get words(): string {
    const fields = this.fieldErrors
      .map((e) => `${e.loc.filter((part) => part !== "body").join(".")}: ${e.msg}`)
      .join("; ");
    const detail = this.detail && this.detail !== this.title ? `: ${this.detail}` : "";
    return `${this.title}${detail}${fields ? ` (${fields})` : ""}`;
  }
}

/** A refused form's field errors: by the field's path in the body (`admin.email`), and
 * by the path's last part (`email`), so a form field finds the message it caused. */
export interface FieldMessages {
  byPath: Record<string, string>;
  byLast: Record<string, string>;
}

export function fieldMessages(error: unknown): FieldMessages {
  const found: FieldMessages = { byPath: {}, byLast: {} };
  if (!(error instanceof ApiError)) return found;
  for (const e of error.fieldErrors) {
    const path = e.loc.filter((part) => part !== "body" && part !== "query").map(String);
    if (!path.length) continue;
    found.byPath[path.join(".")] ??= e.msg;
    found.byLast[path[path.length - 1]] ??= e.msg;
  }
  return found;
}

/** Any failure as a sentence: API problems, network failures, the rest. */
export function describe(error: unknown): string {
  if (error instanceof ApiError) return error.words;
  if (error instanceof TypeError) return "The gateway cannot be reached; check the connection.";
  return error instanceof Error ? error.message : String(error);
}

let csrfToken = "";
let onSignedOut: () => void = () => {};

export function useSession(session: ConsoleSession | null, signedOut: () => void): void {
  csrfToken = session?.csrfToken ?? "";
  onSignedOut = signedOut;
}

const SAFE = new Set(["GET", "HEAD"]);

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (!SAFE.has(method)) headers["x-csrf-token"] = csrfToken;
  const response = await fetch(`/v1${path}`, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  const parsed: unknown = text ? safeJson(text) : undefined;
  if (!response.ok) throw failure(response, path, text, parsed);
  return parsed as T;
}

/** A plain-text answer, as a log is. */
export async function getText(path: string): Promise<string> {
  const response = await fetch(`/v1${path}`, { headers: { accept: "text/plain, application/problem+json" }, credentials: "same-origin" });
  const text = await response.text();
  if (!response.ok) throw failure(response, path, text, safeJson(text));
  return text;
}

function failure(response: Response, path: string, text: string, parsed: unknown): ApiError {
  const problem = (parsed ?? {}) as { title?: string; detail?: string; errors?: FieldError[] };
  if (response.status === 401 && path !== "/console/session") onSignedOut();
  return new ApiError(
    response.status,
    problem.title ?? `HTTP ${response.status}`,
    problem.detail ?? text.slice(0, 300),
    problem.errors ?? [],
  );
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A list answer's items, whether paged (`items`) or a bare array. */
export function items<T>(answer: T[] | { items: T[] }): T[] {
  return Array.isArray(answer) ? answer : answer.items;
}

export const get = <T>(path: string) => api<T>("GET", path);
export const post = <T>(path: string, body?: unknown) => api<T>("POST", path, body ?? {});
export const del = <T>(path: string) => api<T>("DELETE", path);
export const patch = <T>(path: string, body: unknown) => api<T>("PATCH", path, body);
export const put = <T>(path: string, body: unknown) => api<T>("PUT", path, body);

export const enc = encodeURIComponent;
