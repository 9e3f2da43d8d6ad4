// @ts-nocheck
// The deployment of examples/python-model: a FastAPI app behind the replica agent in
// proxy mode. Copy it into functions/ (`cp examples/python-model/sentiment.ts functions/`)
// and the edge serves it at /sentiment/… once an agent registers (README.md here).
// `#switchyard/…` is this repository's src/ (tsconfig.json "paths", as tsx, esbuild and tsc read it): the import works from here and from functions/.
import { defineDeployment } from "#switchyard/config/deployment.ts";

export default defineDeployment({
  name: "sentiment",
  routePrefix: "/sentiment",
  // Anyone may call it locally; give it API keys before it leaves your machine.
  access: { public: true },
  // Replicas are agents in proxy mode, started next to the app (not by `npm start`).
  backend: { kind: "external" },
  maxOngoingRequests: 4,
  // /sentiment/predict reaches the app as /predict.
  policy: { stripPrefix: true, idempotent: true },
});
