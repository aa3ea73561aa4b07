// The validator's rule table, and the rules that ask how the objects fare on
// a real cluster: pinned images, pods spread over machines, cores and
// memory the workers use as requested, disruption budgets, the oldest
// Kubernetes they run on (versions.js), the agent's metrics behind its
// token, Secret files as the kubelet writes them. Each rule reports with
// its id; `validate.js --rules` prints the table (docs/kubernetes.md holds
// a copy, which a test compares). Rows without `check` name checks
// validate.js and etcd.js make inline.
"use strict";
const { valueOf, selects, podTemplates, allContainers, quantity, mountedFrom, portNumber } = require("./objects");
const { checkVersions } = require("./versions");

const kHostname = "kubernetes.io/hostname";
const kWorkingSet = "gradmesh.dev/memory-working-set";
const kBlasThreads = ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS"];
const octal = (mode) => "0" + mode.toString(8);
const isLoopback = (host) => /^(127\.\d+\.\d+\.\d+|localhost|::1|\[::1\])$/.test(host);
const envOf = (c, name) => (c.env || []).find((e) => e.name === name);
const podWhere = (t, kind, c) => `${t.where} ${kind} ${c.name}`;

// --- images -------------------------------------------------------------------
function checkImagePinned(ctx, id) {
  for (const t of podTemplates(ctx.objects))
    for (const { kind, container: c } of allContainers(t.spec)) {
      const image = c.image || "";
      if (/@sha256:[0-9a-f]{64}$/.test(image)) continue;
      const tag = (/:([^/:@]+)$/.exec(image) || [])[1];
      if (!tag) ctx.fail(podWhere(t, kind, c), `image ${image} has no tag, which means :latest: name an exact release (x.y.z) or a digest`, id);
      else if (!/^v?\d+\.\d+\.\d+([-+.][\w.-]+)?$/.test(tag))
        ctx.fail(podWhere(t, kind, c), `image ${image} is not pinned: ${tag} moves; name an exact release (x.y.z) or a digest`, id);
    }
}

function checkPullPolicy(ctx, id) {
  for (const t of podTemplates(ctx.objects))
    for (const { kind, container: c } of allContainers(t.spec)) {
      if (!c.imagePullPolicy)
        ctx.fail(podWhere(t, kind, c), "sets no imagePullPolicy: Kubernetes would pick one from the tag; say which", id);
      else if (c.imagePullPolicy === "Always" && /^localhost\//.test(c.image || ""))
        ctx.fail(podWhere(t, kind, c), `imagePullPolicy Always with ${c.image}: localhost/ is no registry a node can pull from (ErrImagePull); IfNotPresent with the image loaded on the nodes, or push it to a registry`, id);
    }
}

// --- scheduling -----------------------------------------------------------------
const spreadsOverHosts = (spec, labels, strict) =>
  (spec.topologySpreadConstraints || []).some((s) => s.topologyKey === kHostname && selects(s.labelSelector, labels) &&
      (!strict || (s.maxSkew === 1 && s.whenUnsatisfiable === "DoNotSchedule")));

function checkSpread(ctx, id) {
  for (const l of ctx.launchers)
    if (!spreadsOverHosts(l.pod, l.labels, true))
      ctx.fail(l.where, `no topologySpreadConstraint over ${kHostname} (maxSkew 1, whenUnsatisfiable DoNotSchedule) selects the job's pods: several nodes of the job could share a machine, and one drain take them all`, id);
  for (const d of ctx.objects.filter((o) => o.kind === "Deployment")) {
    const hpa = ctx.objects.find((o) => o.kind === "HorizontalPodAutoscaler" && o.spec.scaleTargetRef.name === d.metadata.name);
    const replicas = Math.max(d.spec.replicas === undefined ? 1 : d.spec.replicas, hpa ? hpa.spec.minReplicas || 1 : 1);
    const t = d.spec.template;
    const anti = ((t.spec.affinity || {}).podAntiAffinity || {});
    const antiTerms = [...(anti.requiredDuringSchedulingIgnoredDuringExecution || []),
                       ...(anti.preferredDuringSchedulingIgnoredDuringExecution || []).map((p) => p.podAffinityTerm)];
    const spread = spreadsOverHosts(t.spec, t.metadata.labels, false) ||
        antiTerms.some((a) => a && a.topologyKey === kHostname && selects(a.labelSelector, t.metadata.labels));
    if (replicas > 1 && !spread)
      ctx.fail(`Deployment/${d.metadata.name}`, `${replicas} replicas and no topologySpreadConstraint or pod anti-affinity over ${kHostname}: they could all sit on one machine`, id);
  }
}

// --- cores and memory -------------------------------------------------------------
// train.threads from the mounted config (a TOML subset: the [train] table's
// `threads = N`); gradmesh's default, 1, when it is not there.
function configThreads(text) {
  let table = "";
  for (const line of String(text || "").split("\n")) {
    const header = /^\s*\[([^\]]+)\]/.exec(line);
    if (header) table = header[1].trim();
    const m = /^\s*threads\s*=\s*(\d+)/.exec(line);
    if (table === "train" && m) return Number(m[1]);
  }
  return 1;
}

function checkThreads(ctx, id) {
  for (const l of ctx.launchers) {
    const c = l.container;
    for (const name of kBlasThreads)
      if (envOf(c, name))
        ctx.fail(l.where, `sets ${name}: gradmesh gives BLAS its thread count itself (train.threads, GRADMESH_NUM_THREADS), and a second count contradicts it`, id);
    let threads = configThreads(l.configText);
    let from = `${l.configName}'s train.threads`;
    if (threads === 0) {
      const env = envOf(c, "GRADMESH_NUM_THREADS");
      threads = env && /^\d+$/.test(String(env.value)) ? Number(env.value) : NaN;
      from = "GRADMESH_NUM_THREADS";
      if (!threads) {
        ctx.fail(l.where, `${l.configName} sets train.threads = 0 and GRADMESH_NUM_THREADS is no literal count: each worker would start a thread per core of the machine, not of the pod`, id);
        continue;
      }
    }
    const nproc = Number(valueOf(l.launch, "--nproc-per-node") || (envOf(c, "PET_NPROC_PER_NODE") || {}).value ||
                        ((l.owner.kind === "PyTorchJob" && l.owner.spec.nprocPerNode) || 1));
    if (!Number.isInteger(nproc)) {
      ctx.fail(l.where, "--nproc-per-node must be a number here: the pod's cores are sized by it", id);
      continue;
    }
    const { requests = {}, limits = {} } = c.resources || {};
    const want = nproc * threads;
    if (quantity(requests.cpu) !== want || quantity(limits.cpu) !== want)
      ctx.fail(l.where, `cpu request ${requests.cpu} and limit ${limits.cpu} must both be ${want}: ${nproc} workers x ${threads} thread${threads === 1 ? "" : "s"} (${from})`, id);
  }
}

function checkGuaranteed(ctx, id) {
  for (const t of podTemplates(ctx.objects))
    for (const { kind, container: c } of allContainers(t.spec)) {
      const { requests = {}, limits = {} } = c.resources || {};
      for (const r of ["cpu", "memory"])
        if (requests[r] === undefined || limits[r] === undefined || quantity(requests[r]) !== quantity(limits[r]))
          ctx.fail(podWhere(t, kind, c), `${r} request ${requests[r]} and limit ${limits[r]} must be set and equal (Guaranteed QoS): a Burstable pod is the first a node under pressure evicts`, id);
    }
}

function checkShm(ctx, id) {
  for (const t of podTemplates(ctx.objects)) {
    const shm = (t.spec.volumes || []).filter((v) => v.emptyDir && v.emptyDir.medium === "Memory");
    if (shm.length === 0) continue;
    const limit = allContainers(t.spec).reduce((sum, { container }) => sum + quantity(((container.resources || {}).limits || {}).memory), 0);
    const stated = t.annotations[kWorkingSet];
    for (const v of shm) {
      const size = quantity(v.emptyDir.sizeLimit);
      if (!(size > 0)) ctx.fail(t.where, `the memory-backed emptyDir ${v.name} has no sizeLimit: its pages count against the memory limit, unbounded`, id);
      else if (!(size < limit)) ctx.fail(t.where, `the emptyDir ${v.name} (${v.emptyDir.sizeLimit}) leaves nothing of the memory limit for the workers`, id);
      else if (!stated) ctx.fail(t.where, `states no ${kWorkingSet}: the memory limit less ${v.name}'s ${v.emptyDir.sizeLimit}, what the workers may use`, id);
      else if (size + quantity(stated) !== limit)
        ctx.fail(t.where, `${v.name}'s ${v.emptyDir.sizeLimit} + ${kWorkingSet} ${stated} is not the pod's memory limit (${limit / 2 ** 30}Gi)`, id);
    }
  }
}

// --- the API token ------------------------------------------------------------------
function checkApiToken(ctx, id) {
  for (const t of podTemplates(ctx.objects)) {
    const account = ctx.objects.find((o) => o.kind === "ServiceAccount" && o.metadata.name === t.spec.serviceAccountName);
    const off = t.spec.automountServiceAccountToken === false ||
        (t.spec.automountServiceAccountToken === undefined && account && account.automountServiceAccountToken === false);
    if (!off) ctx.fail(t.where, "must set automountServiceAccountToken: false: it never calls the Kubernetes API, and a token in the pod is one to steal", id);
  }
}

// --- disruption budgets and the store ---------------------------------------------------
const budgetsFor = (ctx, labels) => ctx.objects.filter((o) => o.kind === "PodDisruptionBudget" && selects(o.spec.selector, labels));

function checkStore(ctx, id) {
  const seen = new Set();
  for (const l of ctx.launchers) {
    const store = /^redis:\/\/([^:/@]+):/.exec(valueOf(l.launch, "--rdzv-endpoint") || "");
    const service = store && ctx.named("Service", store[1]);
    if (!service) continue;
    for (const t of podTemplates(ctx.objects).filter((p) => selects({ matchLabels: service.spec.selector }, p.labels))) {
      if (seen.has(t.where)) continue;
      seen.add(t.where);
      const c = t.spec.containers[0];
      const text = [...(c.command || []), ...(c.args || [])].join(" ");
      if (!/appendonly yes/.test(text))
        ctx.fail(t.where, "Redis runs without its append-only file (appendonly yes): a recreated pod would lose the rendezvous", id);
      const dir = (/\bdir (\S+?)(\\n|\s|$)/.exec(text) || [])[1] || "/data";
      const mount = (c.volumeMounts || []).find((m) => dir === m.mountPath || dir.startsWith(m.mountPath.replace(/\/?$/, "/")));
      const claims = ((t.object.spec || {}).volumeClaimTemplates || []).map((v) => v.metadata.name);
      const volume = mount && (t.spec.volumes || []).find((v) => v.name === mount.name);
      if (!mount || !(claims.includes(mount.name) || (volume && volume.persistentVolumeClaim)))
        ctx.fail(t.where, `Redis's data directory ${dir} is on no PersistentVolumeClaim: its state dies with the pod`, id);
      const replicas = (t.object.spec || {}).replicas === undefined ? 1 : t.object.spec.replicas;
      const budgets = budgetsFor(ctx, t.labels);
      if (budgets.length === 0) ctx.fail(t.where, "no PodDisruptionBudget selects the store's pods: a drain takes the rendezvous away", id);
      for (const b of budgets) {
        const allowed = b.spec.minAvailable !== undefined ? replicas - Number(b.spec.minAvailable) : Number(b.spec.maxUnavailable);
        if (!(allowed < replicas))
          ctx.fail(`PodDisruptionBudget/${b.metadata.name}`, `lets a drain take every member of the store (${replicas})`, id);
      }
    }
  }
}

function checkTrainBudget(ctx, id) {
  for (const l of ctx.launchers) {
    const nodes = /^(\d+):(\d+)$/.exec(valueOf(l.launch, "--nnodes") || "");
    if (!l.job || !nodes || nodes[1] === nodes[2]) continue;
    const [min, max] = [Number(nodes[1]), Number(nodes[2])];
    const budgets = budgetsFor(ctx, l.labels);
    if (budgets.length === 0) ctx.fail(l.where, `no PodDisruptionBudget selects the job's pods: a drain could take it below its minimum of ${min} nodes`, id);
    for (const b of budgets) {
      const where = `PodDisruptionBudget/${b.metadata.name}`;
      const m = b.spec.minAvailable;
      if (!Number.isInteger(m))
        ctx.fail(where, "must give minAvailable as a number: a Job has no scale subresource, so maxUnavailable and percentages block every eviction", id);
      else if (m < min) ctx.fail(where, `minAvailable ${m} lets a drain take the job below its minimum of ${min} nodes (--nnodes ${min}:${max})`, id);
      else if (m >= max) ctx.fail(where, `minAvailable ${m} blocks every drain: the job has at most ${max} nodes`, id);
    }
  }
}

// --- the agent's endpoints off the loopback -----------------------------------------------
// The Secret (name, key) a mounted file comes from, or undefined.
function secretOf(pod, container, path) {
  const secret = mountedFrom(pod, container, path, "secret");
  if (!secret) return undefined;
  const file = path.split("/").pop();
  const item = (secret.items || []).find((i) => i.path === file);
  return { name: secret.secretName, key: item ? item.key : file };
}

function checkScrapeAuth(ctx, id, launchers) {
  for (const sm of ctx.objects.filter((o) => o.kind === "ServiceMonitor")) {
    const where = `ServiceMonitor/${sm.metadata.name}`;
    const services = ctx.objects.filter((o) => o.kind === "Service" && selects(sm.spec.selector, o.metadata.labels));
    for (const e of sm.spec.endpoints || []) {
      const targets = services.flatMap((s) => (s.spec.ports || []).filter((p) => p.name === e.port).map((p) => [s, p]));
      if (targets.length === 0) ctx.fail(where, `endpoint port ${e.port} is no port of a Service it selects`, id);
      const auth = (e.authorization && e.authorization.credentials) || e.bearerTokenSecret;
      for (const [s, p] of targets)
        for (const l of launchers.filter((k) => selects({ matchLabels: s.spec.selector }, k.labels))) {
          const port = portNumber(p.targetPort === undefined ? p.port : p.targetPort, [l.container]);
          if (String(port) !== String(valueOf(l.launch, "--agent-port"))) continue;
          const token = secretOf(l.pod, l.container, valueOf(l.launch, "--token-file") || "");
          if (!auth || !token || auth.name !== token.name || auth.key !== token.key)
            ctx.fail(where, `scrapes the agents of ${l.where} without their token: authorization.credentials must be the Secret ${token ? `${token.name}, key ${token.key}` : "the pods mount --token-file from"}`, id);
        }
    }
  }
}

function checkAgentExposure(ctx, id) {
  for (const l of ctx.launchers) {
    const host = valueOf(l.launch, "--agent-host") || "127.0.0.1";
    const token = valueOf(l.launch, "--token-file") || "";
    if (!isLoopback(host) && !secretOf(l.pod, l.container, token))
      ctx.fail(l.where, `--agent-host ${host} without --token-file from a mounted Secret: whoever reaches the pod reads the agent's endpoints`, id);
    const dashboard = valueOf(l.launch, "--dashboard-host");
    if (dashboard && !isLoopback(dashboard))
      ctx.fail(l.where, `--dashboard-host ${dashboard}: the dashboard has no authentication; keep it on the loopback (kubectl port-forward)`, id);
    // Peers from outside the job reach the agent's port and nothing else.
    const port = Number(valueOf(l.launch, "--agent-port"));
    for (const np of ctx.objects.filter((o) => o.kind === "NetworkPolicy" && selects(o.spec.podSelector, l.labels)))
      for (const rule of np.spec.ingress || []) {
        const outside = !rule.from || rule.from.length === 0 ||
            rule.from.some((peer) => peer.namespaceSelector || peer.ipBlock || !selects(peer.podSelector, l.labels));
        const ports = (rule.ports || []).map((p) => portNumber(p.port, [l.container]));
        if (outside && (ports.length === 0 || ports.some((p) => p !== port)))
          ctx.fail(`NetworkPolicy/${np.metadata.name}`, `admits pods outside the job to ${ports.length ? `port ${ports.join(", ")}` : "every port"} of ${l.where}: only the agent's port ${port} (its token guards it; Gloo's connections have none)`, id);
      }
  }
  checkScrapeAuth(ctx, id, ctx.launchers);
}

// --- Secret files -------------------------------------------------------------------------
function checkSecretModes(ctx, id) {
  for (const t of podTemplates(ctx.objects)) {
    const sc = t.spec.securityContext || {};
    for (const v of (t.spec.volumes || []).filter((x) => x.secret)) {
      const modes = [v.secret.defaultMode === undefined ? 0o644 : v.secret.defaultMode,
                     ...(v.secret.items || []).filter((i) => i.mode !== undefined).map((i) => i.mode)];
      const where = `${t.where} volume ${v.name}`;
      for (const mode of modes) {
        if (mode & ~0o440) ctx.fail(where, `mode ${octal(mode)}: a Secret's files are read-only and the pod's own, 0440 at most`, id);
        else if (sc.fsGroup !== undefined && mode !== 0o440)
          ctx.fail(where, `mode ${octal(mode)}, but under fsGroup ${sc.fsGroup} the kubelet makes the files 0440: write 0440, as they will be`, id);
      }
      if (sc.fsGroup === undefined && sc.runAsUser !== 0 && (sc.runAsNonRoot || sc.runAsUser))
        ctx.fail(where, `without fsGroup the Secret's files are root's (${octal(modes[0])}): user ${sc.runAsUser} cannot read them; set fsGroup to the pod's runAsGroup`, id);
      else if (sc.fsGroup !== undefined && sc.fsGroup !== sc.runAsGroup)
        ctx.fail(where, `fsGroup ${sc.fsGroup} is not the pod's runAsGroup ${sc.runAsGroup}: the Secret's files would be readable by another group`, id);
    }
  }
}

const kRules = [
  { id: "schema", what: "every object against the Kubernetes 1.27 API schemas (kubernetes-models); a PyTorchJob's fields by hand", why: "the API server refuses what does not match" },
  { id: "launch-flags", what: "the launcher, worker and server flags are ones the built gradmesh accepts; every $(VAR) is in the container's env", why: "a typo fails only when the pod starts" },
  { id: "store", what: "the store the launchers name: its Service and port, or every etcd member; network policies admit the launchers to it", why: "launchers that cannot reach the store never form a job" },
  { id: "secrets-as-files", what: "passwords and tokens come from mounted Secret files, never env values, Secret env vars or the endpoint", why: "environment dumps and ps show what files do not" },
  { id: "agent-probes", what: "liveness (and readiness, startup) probes ask the agent on 127.0.0.1 with its token; GRADMESH_HOSTNAME is the pod's IP", why: "the kubelet restarts a hung agent; ranks reach each other at the pod's address" },
  { id: "indexed-job", what: "an Indexed Job on the headless Service, completions = parallelism = --nnodes' maximum, a podFailurePolicy for exit 2, 143 and DisruptionTarget, grace period above the agent's, config mounted, --resume auto, /dev/shm mounted", why: "what elastic training and surviving a drain rest on (docs/kubernetes.md)" },
  { id: "serve", what: "the server's token from a Secret, /v2/health/* probes, an autoscaler", why: "the server answers behind a token and scales" },
  { id: "pod-security", what: "every pod non-root with a seccomp profile; containers without privilege escalation, read-only root, capabilities dropped", why: "a compromised process gains nothing from the node" },
  { id: "etcd", what: "the etcd variant: 3, 5 or 7 members that form (Parallel, headless Service, --initial-cluster) and survive a node (claims, anti-affinity, quorum budget, probes, release >= 3.5.3); launchers list every member (etcd.js)", why: "a store that outlives any one machine" },
  { id: "image-pinned", what: "every container's image names an exact release (x.y.z) or a digest; never latest, untagged or a moving tag (redis:7-alpine)", why: "each node would run whatever the tag meant when it pulled", check: checkImagePinned },
  { id: "image-pull-policy", what: "every container sets imagePullPolicy; never Always with a localhost/ image", why: "Kubernetes picks Always for :latest, and nodes cannot pull localhost/ (ErrImagePull)", check: checkPullPolicy },
  { id: "spread", what: "the training pods spread over kubernetes.io/hostname (maxSkew 1, DoNotSchedule, selecting them); a Deployment of several replicas spreads or repels over host names", why: "several nodes of a job on one machine go down together", check: checkSpread },
  { id: "threads-cpu", what: "the launcher's cpu request = limit = --nproc-per-node x threads per worker (train.threads from the mounted train.toml, or GRADMESH_NUM_THREADS when it is 0); no OPENBLAS/OMP/GOTO/MKL_NUM_THREADS", why: "one count in one place: more threads than cores thrash, fewer leave cores idle", check: checkThreads },
  { id: "guaranteed-qos", what: "every container, init containers too, requests what it limits, cpu and memory", why: "Guaranteed pods are evicted last and get whole cores under the static CPU manager", check: checkGuaranteed },
  { id: "shm-budget", what: "a memory-backed emptyDir has a sizeLimit below the pod's memory limit, and sizeLimit + gradmesh.dev/memory-working-set = that limit", why: "tmpfs pages count against the limit: the workers' share must be stated, not found by the OOM killer", check: checkShm },
  { id: "no-api-token", what: "every pod sets automountServiceAccountToken: false (or runs as a ServiceAccount that does)", why: "no pod here calls the API; a mounted token is only something to steal", check: checkApiToken },
  { id: "store-durable", what: "the Redis store keeps its append-only file on a PersistentVolumeClaim, and a PodDisruptionBudget selects it that never lets every member go", why: "a drain or a restart must not wipe the rendezvous", check: checkStore },
  { id: "train-budget", what: "an elastic Job's pods have a PodDisruptionBudget with an integer minAvailable from --nnodes' minimum up to below its maximum", why: "drains never take the job below its minimum, and are never blocked for good", check: checkTrainBudget },
  { id: "min-version", what: "every object states gradmesh.dev/min-kubernetes-version, all alike, and uses no feature newer (versions.js: controller-uid label 1.27, podFailurePolicy 1.26, matchLabelKeys 1.27, Indexed Job 1.24, ...)", why: "a cluster older than stated fails in ways no schema shows (an empty run id)", check: checkVersions },
  { id: "agent-exposure", what: "a non-loopback --agent-host needs --token-file from a mounted Secret; the dashboard stays on the loopback; a ServiceMonitor scraping the agents sends the token from that same Secret; network policies admit pods from outside the job to the agent's port only", why: "/metrics on the pod's IP for Prometheus, and nothing more for anyone else", check: checkAgentExposure },
  { id: "secret-modes", what: "Secret volumes are 0440 under an fsGroup equal to the pod's runAsGroup (0440 at most, never world-readable), and a non-root pod without fsGroup mounts none", why: "the kubelet adds group read under fsGroup, and without it the files are root's: the manifests say the mode the files get", check: checkSecretModes },
];

// Runs every rule that has a check here; ctx: {objects, fail(where, what,
// id), named(kind, name), launchers}.
function runRules(ctx) {
  for (const r of kRules) if (r.check) r.check(ctx, r.id);
}

// The table as Markdown (validate.js --rules).
function ruleTable() {
  const cell = (s) => s.replace(/\|/g, "\\|");
  return ["| rule | checks | why |", "|---|---|---|",
          ...kRules.map((r) => `| \`${r.id}\` | ${cell(r.what)} | ${cell(r.why)} |`)].join("\n");
}

module.exports = { kRules, runRules, ruleTable };
