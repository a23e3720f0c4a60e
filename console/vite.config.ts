import { defineConfig } from "vite";

// The console is served by the gateway at `/`; `make up` builds it into the cache.
export default defineConfig({
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: { target: "es2022", sourcemap: false, assetsInlineLimit: 0 },
});
