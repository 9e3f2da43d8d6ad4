/** Runtime settings shared by wrangler.toml and the local workerd config (keep in step with wrangler.toml). */
export const compatibilityDate = "2026-04-01";
