// @ts-nocheck
// Streams the request body back as it arrives: shows that bytes flow through the
// edge proxy in both directions without buffering.
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "echo",
  routePrefix: "/echo",
  // Anyone may call it (a choice: by default a deployment needs an API key).
  access: { public: true },
  backend: { kind: "echo" },
  localReplicas: 1,
  maxOngoingRequests: 16,
});
