// Streams the request body back as it arrives: shows that bytes flow through the
// edge proxy in both directions without buffering.
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "echo",
  routePrefix: "/echo",
  backend: { kind: "echo" },
  localReplicas: 1,
  maxOngoingRequests: 16,
});
