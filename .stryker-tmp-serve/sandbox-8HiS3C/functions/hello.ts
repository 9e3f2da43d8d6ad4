// @ts-nocheck
// The seed's deployment: every replica answers "hi" (Ray Serve's 48-replica benchmark).
// `npm start -- --replicas hello=48` starts the benchmark's 48 replicas instead of 2.
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "hello",
  routePrefix: "/hello",
  // Anyone may call it (a choice: by default a deployment needs an API key).
  access: { public: true },
  backend: { kind: "text", text: "hi" },
  localReplicas: 2,
  maxOngoingRequests: 5,
  // Answering "hi" has no side effects: a request whose replica died may run elsewhere.
  policy: { idempotent: true },
  // The autoscaling signal (Ray Serve's defaults: 2 ongoing requests per replica, 30 s up, 600 s down).
  autoscaling: { minReplicas: 1, maxReplicas: 48 },
});
