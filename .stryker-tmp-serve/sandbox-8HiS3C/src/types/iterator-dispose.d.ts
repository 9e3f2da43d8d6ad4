// @ts-nocheck
// @types/node 24 loads lib esnext.disposable, so its URLSearchParams iterators (and
// with them Node's URL) carry [Symbol.dispose]; @cloudflare/workers-types declares
// the global URL's iterators as plain IterableIterators, and the compiler then takes
// the global URL that `new URL(…, import.meta.url)` makes for something Node's fs and
// fileURLToPath do not accept. At run time they are one object: both Node 24 and
// workerd give every built-in iterator Iterator.prototype[Symbol.dispose].
interface IterableIterator<T, TReturn = any, TNext = any> {
  [Symbol.dispose](): void;
}
