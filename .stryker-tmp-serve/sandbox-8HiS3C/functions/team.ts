// @ts-nocheck
// A private deployment (the default: a client needs one of its API keys), for the README's
// walkthrough of keys: without a key it answers 401, with one "hi, team".
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "team",
  routePrefix: "/team",
  backend: { kind: "text", text: "hi, team" },
  localReplicas: 1,
  maxOngoingRequests: 5,
  policy: { idempotent: true },
});
