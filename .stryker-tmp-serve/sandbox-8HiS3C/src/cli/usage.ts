/** Help texts of `switchyard` and its commands. */
// @ts-nocheck


export const GLOBAL_OPTIONS = `global options (before or after the command):
  --edge URL          the edge (default: $SWITCHYARD_EDGE, else http://127.0.0.1:8787)
  --admin-secret S    the admin secret (default: $SWITCHYARD_ADMIN_SECRET); a flag is
                      visible to other users in \`ps\`, prefer the variable
  --json              JSON on stdout, for scripts
  -h, --help          help, for the command after which it comes
  --version           print the version`;

export const EXIT_STATUS = `exit status: 0 success; 1 failure (edge unreachable, HTTP error, replica not found,
timeout); 2 usage error (unknown command or option, missing argument, no admin secret)`;

export const MAIN_USAGE = `usage: switchyard [--edge URL] [--json] <command> [options] [arguments]

Operate a Switchyard edge and its replicas.

commands:
  status [DEPLOYMENT]          replicas per deployment: state, load, models
  drain DEPLOYMENT REPLICA_ID  drain a replica (it finishes in-flight requests,
                               deregisters and exits); --wait until it has left
  metrics                      the edge's Prometheus metrics; --follow watches them
  autoscale [DEPLOYMENT]       current and desired replica counts
  replica [REPLICA OPTIONS]    run a reference replica (switchyard replica --help)
  agent                        a replica agent: puts vLLM or SGLang, or with --proxy
                               any HTTP model server, behind the edge
  help [COMMAND]               this text, or a command's

${GLOBAL_OPTIONS}

Admin commands (status, drain, metrics, autoscale) need the admin secret.
${EXIT_STATUS}`;

export const COMMAND_USAGE: Record<string, string> = {
  status: `usage: switchyard status [DEPLOYMENT] [--json]

Lists the replicas of every deployment the edge serves (or of DEPLOYMENT) as the
routing Durable Object sees them: DEPLOYMENT, REPLICA, STATE (ready/draining),
LOAD (ongoing/max, and queued requests if any), MODELS (loaded; a * marks one
being loaded) and URL. --json prints {edge, deployments: [{name, routePrefix,
replicas: [{id, url, state, ongoing, queued, max, models, loading, epoch,
expiresInMs}], router}]} instead.

${GLOBAL_OPTIONS}
${EXIT_STATUS}`,

  drain: `usage: switchyard drain DEPLOYMENT REPLICA_ID [--wait [--timeout SECONDS]] [--json]

Asks a replica to drain: the edge stops routing to it, it finishes its in-flight
requests, deregisters and exits. Without --wait the command returns once the edge
has accepted the request.

options:
  --wait              wait until the replica has left the routing table
  --timeout SECONDS   how long --wait waits (default 60); exit 1 when it runs out

${GLOBAL_OPTIONS}
${EXIT_STATUS}`,

  metrics: `usage: switchyard metrics [--grep REGEX] [--follow [--interval SECONDS]] [--json]

Prints the edge's metrics (GET /-/metrics, Prometheus text format).

options:
  --grep REGEX        only the lines that match REGEX (JavaScript syntax)
  -f, --follow        fetch again every interval and print the samples whose value
                      changed, each after a time stamp, until Ctrl-C (exit 0)
  --interval SECONDS  the interval of --follow (default 2)
  --json              a JSON array of samples [{name, labels, value, timestamp?}]
                      (value +Inf, -Inf and NaN as strings); with --follow one line
                      per fetch: {time, samples}

${GLOBAL_OPTIONS}
${EXIT_STATUS}`,

  autoscale: `usage: switchyard autoscale [DEPLOYMENT] [--json]

Shows each deployment's (or DEPLOYMENT's) current and desired replica counts as
the edge's autoscaling policy computes them (GET /-/deployments/NAME/autoscale).
--json prints {edge, deployments: [<the edge's answer per deployment>]}.

${GLOBAL_OPTIONS}
${EXIT_STATUS}`,

  replica: `usage: switchyard replica [REPLICA OPTIONS]

Runs a reference replica with these options (switchyard replica --help lists them).
Without its own --edge it gets switchyard's (--edge before "replica", or
$SWITCHYARD_EDGE, else http://127.0.0.1:8787). SIGTERM and SIGINT drain it; the exit
status is the replica's.`,

  agent: `usage: switchyard agent --deployment NAME --engine-url URL [AGENT OPTIONS] [-- ENGINE COMMAND...]
       switchyard agent --proxy --deployment NAME --app-url URL [OPTIONS] [-- APP COMMAND...]

Runs the replica agent (docs/agent.md): it registers an OpenAI-compatible engine
(vLLM, SGLang) with its deployment at the edge, turns the engine's /metrics into
load reports every 100 ms, and on SIGTERM drains before it stops the engine it
started (the command after "--"). With --proxy it fronts any HTTP model server
(FastAPI, Triton, TorchServe, BentoML, Ray Serve) on the token path: it checks the
edge's signatures, refuses beyond its capacity, reports its load, passes streams
through, and stops the app after draining. "switchyard agent --help" and
"switchyard agent --proxy --help" list the options.
Without its own --edge it gets switchyard's (--edge before "agent", or
$SWITCHYARD_EDGE, else http://127.0.0.1:8787). The exit status is the agent's.`,

  help: `usage: switchyard help [COMMAND]

Prints the usage of switchyard, or of COMMAND.`,
};

export const COMMANDS = Object.keys(COMMAND_USAGE);

/**
 * The short usage printed after a usage error (stderr): the usage line, and for
 * switchyard itself the commands, then where the full help is.
 */
export function shortUsage(command?: string): string {
  if (command !== undefined && command in COMMAND_USAGE) {
    const first = COMMAND_USAGE[command]!.split("\n\n")[0]!;
    return `${first}\nRun "switchyard help ${command}" for more.`;
  }
  const [line, , commands] = MAIN_USAGE.split("\n\n");
  return `${line}\n\n${commands}\n\nRun "switchyard --help" for the options.`;
}
