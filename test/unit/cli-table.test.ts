/** Tables of the CLI: `status` and `autoscale` on a fixed input, alignment and colour. */
import { describe, expect, it } from "vitest";
import { renderAutoscaleTable } from "../../src/cli/commands/autoscale.ts";
import { formatLoad, formatModels, renderStatusTable, statusDocument, type DeploymentAnswer } from "../../src/cli/commands/status.ts";
import { renderTable, sanitize } from "../../src/cli/table.ts";

const replica = (id: string, load: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  id,
  url: `http://127.0.0.1:${4000 + Number(id.at(-1))}`,
  epoch: 1,
  load: { seq: 3, ongoing: 0, queued: 0, max: 5, state: "ready", ...load },
  models: [],
  loading: [],
  expiresInMs: 2500,
  ...extra,
});

const answers: { name: string; routePrefix: string | null; answer: DeploymentAnswer }[] = [
  {
    name: "vad",
    routePrefix: "/vad",
    answer: {
      snapshot: {
        replicas: [
          replica("vad-2", { ongoing: 2, max: 4, queued: 3 }, { models: ["silero-vad-v5"], loading: ["silero-vad-v6"] }),
          replica("vad-1", { ongoing: 4, max: 4, state: "draining", kv: 0.5 }, { models: ["silero-vad-v4", "silero-vad-v5"] }),
        ],
      },
      router: { members: 2, fresh: 2 },
    },
  },
  { name: "hello", routePrefix: "/hello", answer: { snapshot: { replicas: [replica("hello-1", { ongoing: 1 })] }, router: { members: 1 } } },
  { name: "echo", routePrefix: null, answer: { deployment: { name: "echo", routePrefix: "/echo" }, snapshot: { replicas: [] } } },
];

describe("status", () => {
  const doc = statusDocument("http://edge", answers);

  it("renders aligned columns, sorted by deployment and replica", () => {
    expect(renderStatusTable(doc)).toBe(
      [
        "DEPLOYMENT  REPLICA  STATE        LOAD           MODELS                        URL",
        "echo        -        no replicas  -              -                             -",
        "hello       hello-1  ready        1/5            -                             http://127.0.0.1:4001",
        "vad         vad-1    draining     4/4            silero-vad-v4,silero-vad-v5   http://127.0.0.1:4001",
        "vad         vad-2    ready        2/4 +3 queued  silero-vad-v5,silero-vad-v6*  http://127.0.0.1:4002",
        "",
      ].join("\n"),
    );
  });

  it("has no colour unless asked, and colours only the text when asked", () => {
    expect(renderStatusTable(doc)).not.toMatch(/\x1b/);
    const coloured = renderStatusTable(doc, true);
    expect(coloured).toContain("\x1b[32mready\x1b[39m");
    expect(coloured).toContain("\x1b[33mdraining\x1b[39m");
    // Without the escapes it is the plain table.
    expect(coloured.replace(/\x1b\[\d+m/g, "")).toBe(renderStatusTable(doc));
  });

  it("builds a stable JSON document", () => {
    expect(doc.deployments.map((d) => d.name)).toEqual(["echo", "hello", "vad"]);
    expect(doc.deployments[0]).toEqual({ name: "echo", routePrefix: "/echo", replicas: [], router: null });
    expect(doc.deployments[2]!.replicas[0]).toEqual({
      id: "vad-1",
      url: "http://127.0.0.1:4001",
      state: "draining",
      ongoing: 4,
      queued: 0,
      max: 4,
      kv: 0.5,
      models: ["silero-vad-v4", "silero-vad-v5"],
      loading: [],
      epoch: 1,
      expiresInMs: 2500,
    });
    expect(Object.keys(doc.deployments[2]!.replicas[0]!)).toEqual(["id", "url", "state", "ongoing", "queued", "max", "kv", "models", "loading", "epoch", "expiresInMs"]);
    expect(Object.keys(doc.deployments[2]!.replicas[1]!)).toEqual(["id", "url", "state", "ongoing", "queued", "max", "models", "loading", "epoch", "expiresInMs"]);
  });

  it("shows a REGION column, and region last in the JSON, only when some replica declared one", () => {
    const placed = statusDocument("http://edge", [
      {
        name: "llm",
        routePrefix: "/llm",
        answer: { snapshot: { replicas: [replica("llm-1", { kv: 0.25 }, { region: "eu-central" }), replica("llm-2", {}), replica("llm-3", {}, { region: 7 })] } },
      },
    ]);
    expect(renderStatusTable(placed)).toBe(
      [
        "DEPLOYMENT  REPLICA  STATE  REGION      LOAD  MODELS  URL",
        "llm         llm-1    ready  eu-central  0/5   -       http://127.0.0.1:4001",
        "llm         llm-2    ready  -           0/5   -       http://127.0.0.1:4002",
        "llm         llm-3    ready  -           0/5   -       http://127.0.0.1:4003",
        "",
      ].join("\n"),
    );
    const [one, two, three] = placed.deployments[0]!.replicas;
    expect(Object.keys(one!)).toEqual(["id", "url", "state", "ongoing", "queued", "max", "kv", "models", "loading", "epoch", "expiresInMs", "region"]);
    expect(one!.region).toBe("eu-central");
    expect(two).not.toHaveProperty("region");
    expect(three).not.toHaveProperty("region");
    // A deployment without replicas gets a dash in the column too.
    const withEmpty = statusDocument("http://edge", [...answers.slice(2), { name: "llm", routePrefix: "/llm", answer: { snapshot: { replicas: [replica("llm-1", {}, { region: "fra" })] } } }]);
    expect(renderStatusTable(withEmpty).split("\n").slice(0, 3)).toEqual([
      "DEPLOYMENT  REPLICA  STATE        REGION  LOAD  MODELS  URL",
      "echo        -        no replicas  -       -     -       -",
      "llm         llm-1    ready        fra     0/5   -       http://127.0.0.1:4001",
    ]);
  });

  it("refuses an answer without a snapshot", () => {
    expect(() => statusDocument("http://edge", [{ name: "x", routePrefix: null, answer: {} }])).toThrow(/snapshot\.replicas/);
  });

  it("formats load and models", () => {
    expect(formatLoad({ ongoing: 0, max: 5, queued: 0 })).toBe("0/5");
    expect(formatLoad({ ongoing: 5, max: 5, queued: 12 })).toBe("5/5 +12 queued");
    expect(formatModels({ models: [], loading: [] })).toBe("-");
    expect(formatModels({ models: ["a"], loading: ["b", "a"] })).toBe("a,b*");
  });
});

describe("renderTable", () => {
  it("pads every column but the last, aligns right on request, and leaves no trailing spaces", () => {
    expect(renderTable(["A", "BB", "C"], [["xyz", "1", ""], ["x", "22", "end"]], { alignRight: [1] })).toBe("A    BB  C\nxyz   1\nx    22  end\n");
  });

  it("replaces control characters from the edge", () => {
    expect(sanitize("a\x1b[2Jb\nc")).toBe("a?[2Jb?c");
    expect(renderTable(["X"], [["\x1b]0;evil\x07"]])).toBe("X\n?]0;evil?\n");
  });
});

describe("autoscale table", () => {
  it("shows current and desired, and the rest as details", () => {
    const out = renderAutoscaleTable({
      edge: "http://edge",
      deployments: [
        { deployment: "hello", current: 2, desired: 2, reason: "steady" },
        { deployment: "vad", current: 3, desired: 10, reason: "queue", window: { s: 30 } },
      ],
    });
    expect(out).toBe(
      [
        "DEPLOYMENT  CURRENT  DESIRED  DETAILS",
        "hello             2        2  reason=steady",
        'vad               3       10  reason=queue window={"s":30}',
        "",
      ].join("\n"),
    );
  });
});
