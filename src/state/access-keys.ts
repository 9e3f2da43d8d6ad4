/**
 * The AccessKeys Durable Object: one per deployment, the deployment's client API
 * keys. Only SHA-256 hashes are stored; a key's plain text exists once, in the
 * answer to `create`. Proxy isolates fetch the set of active hashes every few
 * seconds (src/proxy/serve/access.ts) and check keys locally, so this object sees no
 * call per request, and a revoked key stops working everywhere within that TTL.
 */
import { DurableObject } from "cloudflare:workers";
import { hashApiKey, newApiKey } from "./api-key-format.ts";

export interface ApiKeyInfo {
  id: string;
  name: string;
  /** The key's first characters, to recognise it in lists (never enough to use it). */
  prefix: string;
  created_at: number;
  revoked_at: number | null;
}

export interface CreatedApiKey extends ApiKeyInfo {
  /** The key itself: shown once, stored nowhere. */
  key: string;
}

interface Row {
  id: string;
  name: string;
  prefix: string;
  created_at: number;
  revoked_at: number | null;
  [column: string]: SqlStorageValue;
}

/** The binding of the AccessKeys objects (wrangler.toml: KEYS). */
export interface KeysBinding {
  KEYS: DurableObjectNamespace<AccessKeys>;
}

/** The AccessKeys object of a deployment. */
export function keysFor(env: KeysBinding, deployment: string): DurableObjectStub<AccessKeys> {
  return env.KEYS.get(env.KEYS.idFromName(deployment));
}

export class AccessKeys extends DurableObject<KeysBinding> {
  constructor(ctx: DurableObjectState, env: KeysBinding) {
    super(ctx, env);
    ctx.storage.sql.exec(`CREATE TABLE IF NOT EXISTS keys (
      id TEXT PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL UNIQUE, prefix TEXT NOT NULL,
      created_at INTEGER NOT NULL, revoked_at INTEGER)`);
  }

  async create(name: string): Promise<CreatedApiKey> {
    const key = newApiKey();
    const info: ApiKeyInfo = { id: `key_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`, name, prefix: key.slice(0, 10), created_at: Date.now(), revoked_at: null };
    this.ctx.storage.sql.exec(
      "INSERT INTO keys (id, name, hash, prefix, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, NULL)",
      info.id,
      info.name,
      await hashApiKey(key),
      info.prefix,
      info.created_at,
    );
    return { ...info, key };
  }

  list(): ApiKeyInfo[] {
    return this.ctx.storage.sql.exec<Row>("SELECT id, name, prefix, created_at, revoked_at FROM keys ORDER BY created_at").toArray().map((r) => ({ ...r }));
  }

  /** Revokes a key; false when there is no such key (or it was revoked already). */
  revoke(id: string): boolean {
    const cursor = this.ctx.storage.sql.exec("UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", Date.now(), id);
    return cursor.rowsWritten > 0;
  }

  /** Hashes of the keys in force: what proxies check against. */
  activeHashes(): string[] {
    return this.ctx.storage.sql.exec<{ hash: string }>("SELECT hash FROM keys WHERE revoked_at IS NULL").toArray().map((r) => r.hash);
  }
}
