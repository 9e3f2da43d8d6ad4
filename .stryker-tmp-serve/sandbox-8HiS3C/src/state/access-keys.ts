/**
 * The AccessKeys Durable Object: one per deployment, the deployment's client API
 * keys. Only SHA-256 hashes are stored; a key's plain text exists once, in the
 * answer to `create`. Proxy isolates fetch the set of active hashes every few
 * seconds (src/proxy/serve/access.ts) and check keys locally, so this object sees no
 * call per request, and a revoked key stops working everywhere within that TTL.
 */
// @ts-nocheck

import { DurableObject } from "cloudflare:workers";
import { hashApiKey, newApiKey } from "./api-key-format.ts";

/** A key's priority class (docs/admission.md): its requests' default priority and the highest they may ask for. */
export interface KeyPriority {
  default: number;
  max: number;
}

/** A key in force, as proxies check it: its hash, and its priority class when it has one. */
export interface ActiveKey {
  hash: string;
  priority?: KeyPriority;
}

export interface ApiKeyInfo {
  id: string;
  name: string;
  /** The key's priority class; absent: the deployment's admission defaults. */
  priority?: KeyPriority;
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
  priority: string | null;
  [column: string]: SqlStorageValue;
}

const priorityOf = (raw: string | null): { priority?: KeyPriority } => (raw === null ? {} : { priority: JSON.parse(raw) as KeyPriority });

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
    // Storage written before keys had priority classes has no such column.
    if (!ctx.storage.sql.exec<{ name: string }>("PRAGMA table_info(keys)").toArray().some((c) => c.name === "priority")) {
      ctx.storage.sql.exec("ALTER TABLE keys ADD COLUMN priority TEXT");
    }
  }

  async create(name: string, priority?: KeyPriority): Promise<CreatedApiKey> {
    const key = newApiKey();
    const info: ApiKeyInfo = {
      id: `key_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`,
      name,
      prefix: key.slice(0, 10),
      created_at: Date.now(),
      revoked_at: null,
      ...(priority ? { priority } : {}),
    };
    this.ctx.storage.sql.exec(
      "INSERT INTO keys (id, name, hash, prefix, created_at, revoked_at, priority) VALUES (?, ?, ?, ?, ?, NULL, ?)",
      info.id,
      info.name,
      await hashApiKey(key),
      info.prefix,
      info.created_at,
      priority ? JSON.stringify(priority) : null,
    );
    return { ...info, key };
  }

  list(): ApiKeyInfo[] {
    return this.ctx.storage.sql
      .exec<Row>("SELECT id, name, prefix, created_at, revoked_at, priority FROM keys ORDER BY created_at")
      .toArray()
      .map(({ priority, ...r }) => ({ ...r, ...priorityOf(priority) }));
  }

  /** Revokes a key; false when there is no such key (or it was revoked already). */
  revoke(id: string): boolean {
    const cursor = this.ctx.storage.sql.exec("UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", Date.now(), id);
    return cursor.rowsWritten > 0;
  }

  /** The keys in force: what proxies check against (hashes, and priority classes). */
  activeKeys(): ActiveKey[] {
    return this.ctx.storage.sql
      .exec<{ hash: string; priority: string | null }>("SELECT hash, priority FROM keys WHERE revoked_at IS NULL")
      .toArray()
      .map((r) => ({ hash: r.hash, ...priorityOf(r.priority) }));
  }
}
