#!/usr/bin/env node
// Offline checks of rendered gradmesh manifests (`kubectl kustomize DIR`):
//
//  1. every object against the Kubernetes API schemas (kubernetes-models,
//     pinned in package-lock.json); a PyTorchJob's own fields by hand and its
//     pod templates against the core schema;
//  2. what `gradmesh launch` in a pod needs: flags gradmesh knows (checked
//     against its --help), $(VARS) defined, the store (a Redis Service and
//     port, or the members of an etcd StatefulSet: etcd.js) and a network
//     policy that lets the launchers reach it, secrets as mounted files
//     (never literal values), probes on the agent's port with its token, the
//     pod's address as GRADMESH_HOSTNAME, an Indexed Job on the headless
//     Service, a grace period longer than the agent's, a mounted config;
//  3. the server's token and probes, the autoscaler's target, the network
//     policies' selection, an etcd cluster that forms and survives a node
//     (etcd.js), and every pod non-root with resource requests;
//  4. how the objects fare on a real cluster (rules.js): pinned images,
//     spread, cores and memory as requested, disruption budgets, the oldest
//     Kubernetes they run on (versions.js), the agent's metrics behind its
//     token, Secret files' modes.
//
// usage: validate.js --launch-help FILE --train-help FILE --serve-help FILE [--launch-args OUT] RENDERED.yaml
//        validate.js --rules   (the rule table, as Markdown)
// (--launch-args: append each launcher's arguments before `--` to OUT, one
// JSON array per line, for a test to run them through gradmesh launch)
// Exit 0 when every check passes; 1 with one line per problem otherwise.
"use strict";
const fs = require("fs");
const YAML = require("yaml");
const { valueOf, selects, podTemplates, mountedFrom, portNumber, admits } = require("./objects");
const etcd = require("./etcd");
const { runRules, ruleTable } = require("./rules");

const args = process.argv.slice(2);
if (args.length === 1 && args[0] === "--rules") {
  console.log(ruleTable());
  process.exit(0);
}
const opts = {};
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i].startsWith("--")) opts[args[i].slice(2)] = args[++i];
  else files.push(args[i]);
}
if (files.length !== 1 || !opts["launch-help"] || !opts["train-help"] || !opts["serve-help"]) {
  console.error("usage: validate.js --launch-help FILE --train-help FILE --serve-help FILE RENDERED.yaml");
  process.exit(2);
}
const help = {
  launch: fs.readFileSync(opts["launch-help"], "utf8"),
  train: fs.readFileSync(opts["train-help"], "utf8"),
  serve: fs.readFileSync(opts["serve-help"], "utf8"),
};

const problems = [];
const fail = (where, what, rule) => {
  const line = `${where}: ${what}${rule ? ` [${rule}]` : ""}`;
  if (!problems.includes(line)) problems.push(line);  // once, however many launchers share the cause
};

// --- 1. schemas --------------------------------------------------------------
const MODELS = {
  "v1/ConfigMap": ["kubernetes-models/v1", "ConfigMap"],
  "v1/Service": ["kubernetes-models/v1", "Service"],
  "v1/Secret": ["kubernetes-models/v1", "Secret"],
  "v1/PersistentVolumeClaim": ["kubernetes-models/v1", "PersistentVolumeClaim"],
  "apps/v1/Deployment": ["kubernetes-models/apps/v1", "Deployment"],
  "apps/v1/StatefulSet": ["kubernetes-models/apps/v1", "StatefulSet"],
  "policy/v1/PodDisruptionBudget": ["kubernetes-models/policy/v1", "PodDisruptionBudget"],
  "batch/v1/Job": ["kubernetes-models/batch/v1", "Job"],
  "autoscaling/v2/HorizontalPodAutoscaler": ["kubernetes-models/autoscaling/v2", "HorizontalPodAutoscaler"],
  "networking.k8s.io/v1/NetworkPolicy": ["kubernetes-models/networking.k8s.io/v1", "NetworkPolicy"],
};

function schemaCheck(where, module, name, object) {
  const Model = require(module)[name];
  try {
    new Model(object).validate();
  } catch (e) {
    fail(where, `does not match the ${name} schema: ${e.message}`);
  }
}

const docs = YAML.parseAllDocuments(fs.readFileSync(files[0], "utf8")).map((d) => d.toJS());
const objects = docs.filter((o) => o && typeof o === "object");
if (objects.length === 0) fail(files[0], "no objects");
const named = (kind, name) => objects.find((o) => o.kind === kind && o.metadata && o.metadata.name === name);
const launcherPods = [];  // what rules.js asks of each launcher: see checkLauncher
const ctx = { objects, fail, named, launchers: launcherPods };

for (const o of objects) {
  const where = `${o.kind}/${o.metadata && o.metadata.name}`;
  const key = `${o.apiVersion}/${o.kind}`;
  if (MODELS[key]) {
    schemaCheck(where, ...MODELS[key], o);
  } else if (key === "kubeflow.org/v1/PyTorchJob") {
    const specs = (o.spec && o.spec.pytorchReplicaSpecs) || {};
    if (!specs.Master) fail(where, "needs spec.pytorchReplicaSpecs.Master");
    for (const [role, spec] of Object.entries(specs)) {
      if (!["Master", "Worker"].includes(role)) fail(where, `unknown replica type ${role}`);
      if (!Number.isInteger(spec.replicas) || spec.replicas < 1) fail(where, `${role}.replicas must be a positive integer`);
      if (!["Always", "OnFailure", "Never", "ExitCode"].includes(spec.restartPolicy))
        fail(where, `${role}.restartPolicy must be Always, OnFailure, Never or ExitCode`);
      schemaCheck(`${where} ${role}`, "kubernetes-models/v1", "PodTemplateSpec", spec.template);
      const names = ((spec.template.spec || {}).containers || []).map((c) => c.name);
      if (!names.includes("pytorch")) fail(where, `${role}: the operator needs a container named "pytorch"`);
    }
  } else if (key === "monitoring.coreos.com/v1/ServiceMonitor") {
    // The Prometheus Operator's CRD: the fields the rules read, by hand.
    const spec = o.spec || {};
    if (!spec.selector || typeof spec.selector !== "object") fail(where, "needs spec.selector");
    if (!Array.isArray(spec.endpoints) || spec.endpoints.length === 0) fail(where, "needs spec.endpoints");
    for (const e of spec.endpoints || [])
      if (typeof e.port !== "string") fail(where, "each endpoint names its Service port (port: NAME)");
  } else {
    fail(where, `no schema for ${key}`);
  }
}

// --- 2. what gradmesh launch needs -------------------------------------------
const flagsOf = (list) => list.filter((a) => a.startsWith("--")).map((a) => a.split("=")[0]);
const knownFlag = (text, flag) => new RegExp(`(^|[\\s,])${flag.replace(/-/g, "\\-")}([\\s,=]|$)`, "m").test(text);

function checkSecretsAreFiles(where, container) {
  for (const e of container.env || []) {
    if (/PASSWORD|TOKEN|SECRET/.test(e.name) && !/_FILE$/.test(e.name) && e.value !== undefined)
      fail(where, `env ${e.name} holds a literal value: secrets go in mounted files (${e.name}_FILE)`);
    if (/PASSWORD|TOKEN|SECRET/.test(e.name) && e.valueFrom && e.valueFrom.secretKeyRef)
      fail(where, `env ${e.name} comes from a Secret: environment dumps would show it; mount it as a file`);
  }
  for (const a of container.args || [])
    if (/(redis|etcds?):\/\/[^@/]*:[^@/]+@/.test(a)) fail(where, `a store password on the command line: ${a}`);
}

// The Redis store: its Service and port, its password as a mounted file, and
// a network policy that admits the launchers (pods labelled `labels`).
function checkRedisStore(where, pod, container, endpoint, labels) {
  const store = /^redis:\/\/([^:/@]+):(\d+)/.exec(endpoint);
  if (!store) return fail(where, `--rdzv-endpoint ${endpoint} is not redis://service:port or etcd://member:port,...`);
  const service = named("Service", store[1]);
  const port = service && (service.spec.ports || []).find((p) => String(p.port) === store[2]);
  if (!service) fail(where, `the store's Service ${store[1]} is not among the objects`);
  else if (!port) fail(where, `Service ${store[1]} has no port ${store[2]}`);
  const passwordFile = (container.env || []).find((e) => e.name === "GRADMESH_REDIS_PASSWORD_FILE");
  if (!passwordFile || !mountedFrom(pod, container, passwordFile.value, "secret"))
    fail(where, "GRADMESH_REDIS_PASSWORD_FILE must name a file mounted from a Secret");
  if (!port) return;
  const backend = podTemplates(objects).find((t) => selects({ matchLabels: service.spec.selector }, t.labels));
  if (!backend) return fail(where, `Service ${store[1]} selects no pods among the objects`);
  const target = portNumber(port.targetPort === undefined ? port.port : port.targetPort, backend.spec.containers);
  const reach = admits(objects, backend.labels, backend.spec.containers, labels, target);
  if (reach === "isolated-none") fail(backend.where, "no NetworkPolicy selects the store's pods: any pod could reach it");
  else if (!reach) fail(where, `the network policies do not let the launchers reach ${backend.where} on port ${target}`);
}

function checkLauncher(where, pod, container, job, labels, owner) {
  const all = [...(container.command || []), ...(container.args || [])];
  const split = all.indexOf("--");
  const launch = split < 0 ? all : all.slice(0, split);
  if (opts["launch-args"]) fs.appendFileSync(opts["launch-args"], JSON.stringify(launch) + "\n");
  const worker = split < 0 ? [] : all.slice(split + 1);
  if (!launch.includes("launch")) return fail(where, "does not run gradmesh launch");
  const record = { where, pod, container, job, labels, owner, launch, configName: "", configText: "" };
  launcherPods.push(record);
  for (const flag of flagsOf(launch))
    if (!knownFlag(help.launch, flag)) fail(where, `gradmesh launch has no flag ${flag}`);
  if (worker[0] !== "gradmesh" || worker[1] !== "train") fail(where, "the worker command is not gradmesh train");
  for (const flag of flagsOf(worker.slice(2)))
    if (!knownFlag(help.train, flag)) fail(where, `gradmesh train has no flag ${flag}`);

  const env = new Map((container.env || []).map((e) => [e.name, e]));
  for (const a of all)
    for (const m of a.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g))
      if (!env.has(m[1])) fail(where, `$(${m[1]}) in the arguments is not in the container's env`);
  checkSecretsAreFiles(where, container);

  const endpoint = valueOf(launch, "--rdzv-endpoint") || "";
  if (/^etcds?:\/\//.test(endpoint)) etcd.checkEndpoint(ctx, where, pod, container, endpoint, labels);
  else checkRedisStore(where, pod, container, endpoint, labels);
  const hostname = env.get("GRADMESH_HOSTNAME");
  if (!hostname || !hostname.valueFrom || (hostname.valueFrom.fieldRef || {}).fieldPath !== "status.podIP")
    fail(where, "GRADMESH_HOSTNAME must be the pod's IP (fieldRef status.podIP): ranks reach each other there");

  const port = valueOf(launch, "--agent-port");
  const token = valueOf(launch, "--token-file");
  if (!port) fail(where, "no --agent-port: the probes have nothing to ask");
  if (!token || !mountedFrom(pod, container, token, "secret")) fail(where, "--token-file must be mounted from a Secret");
  const probes = ["livenessProbe", "readinessProbe", "startupProbe"].filter((p) => container[p]);
  if (!probes.includes("livenessProbe")) fail(where, "no liveness probe");
  for (const p of probes) {
    const cmd = ((container[p].exec || {}).command || []).join(" ");
    if (!cmd.startsWith("gradmesh probe http://127.0.0.1:" + port + "/"))
      fail(where, `${p} must run gradmesh probe on the agent's port ${port}: ${cmd}`);
    if (!cmd.includes("--token-file " + token)) fail(where, `${p} must send the agent's token (${token})`);
  }

  const config = worker[2] || "";
  const configMap = mountedFrom(pod, container, config, "configMap");
  if (!configMap) fail(where, `the config ${config} is not in a mounted ConfigMap`);
  else {
    const cm = named("ConfigMap", configMap.name);
    const key = config.split("/").pop();
    if (!cm || !(cm.data || {})[key]) fail(where, `ConfigMap ${configMap.name} has no ${key}`);
    else Object.assign(record, { configName: key, configText: cm.data[key] });
  }
  if (!worker.some((a) => a === "--resume=auto" || a === "auto"))
    fail(where, "gradmesh train needs --resume auto: a restarted pod continues from the latest checkpoint");
  if (!(container.volumeMounts || []).some((m) => m.mountPath === "/dev/shm"))
    fail(where, "mount an emptyDir (medium Memory) at /dev/shm: a container's default 64 MiB is too small for shm");

  const grace = Number(valueOf(launch, "--grace-period") || 10);
  if (!(pod.terminationGracePeriodSeconds > grace))
    fail(where, `terminationGracePeriodSeconds (${pod.terminationGracePeriodSeconds}) must exceed --grace-period ${grace}`);

  if (job) {
    const spec = job.spec;
    if (spec.completionMode !== "Indexed") fail(where, "the Job must be Indexed (completionMode: Indexed)");
    if (pod.restartPolicy !== "Never") fail(where, "restartPolicy must be Never (a podFailurePolicy requires it)");
    if (pod.subdomain !== "gradmesh-workers" || !named("Service", pod.subdomain))
      fail(where, "the pods' subdomain must be the headless Service gradmesh-workers");
    const nodes = /^(\d+):(\d+)$|^(\d+)$/.exec(valueOf(launch, "--nnodes") || "");
    const max = nodes ? Number(nodes[2] || nodes[3]) : NaN;
    if (spec.completions !== max || spec.parallelism !== max)
      fail(where, `completions and parallelism must equal --nnodes' maximum (${max})`);
    const rules = (spec.podFailurePolicy || {}).rules || [];
    const onCodes = (action, code) =>
      rules.some((r) => r.action === action && r.onExitCodes && r.onExitCodes.values.includes(code));
    if (!onCodes("FailJob", 2)) fail(where, "a usage error (exit 2) must fail the Job at once");
    if (!onCodes("Ignore", 143)) fail(where, "a SIGTERM stop (exit 143) must not count against backoffLimit");
    if (!rules.some((r) => r.action === "Ignore" && (r.onPodConditions || []).some((c) => c.type === "DisruptionTarget")))
      fail(where, "a drained or preempted pod (DisruptionTarget) must not count against backoffLimit");
  }
}

let launchers = 0;
for (const o of objects) {
  const templates = [];
  if (o.kind === "Job") templates.push([o.metadata.name, o.spec.template, o]);
  if (o.kind === "PyTorchJob")
    for (const [role, spec] of Object.entries(o.spec.pytorchReplicaSpecs || {}))
      templates.push([`${o.metadata.name} ${role}`, spec.template, null]);
  for (const [name, template, job] of templates) {
    for (const c of template.spec.containers || []) {
      launchers++;
      checkLauncher(`${o.kind}/${name} container ${c.name}`, template.spec, c, job, (template.metadata || {}).labels || {}, o);
    }
  }
}
if (launchers === 0) fail(files[0], "no Job or PyTorchJob runs gradmesh launch");

// --- 3. the server, the autoscaler, the network policies -----------------------
for (const d of objects.filter((o) => o.kind === "Deployment" && o.metadata.name === "gradmesh-serve")) {
  const pod = d.spec.template.spec;
  const c = pod.containers[0];
  const where = `Deployment/${d.metadata.name}`;
  const args = c.args || [];
  if (args[0] !== "serve") fail(where, "does not run gradmesh serve");
  for (const flag of flagsOf(args)) if (!knownFlag(help.serve, flag)) fail(where, `gradmesh serve has no flag ${flag}`);
  const token = valueOf(args, "--token-file");
  if (!token || !mountedFrom(pod, c, token, "secret")) fail(where, "--token-file must be mounted from a Secret");
  checkSecretsAreFiles(where, c);
  for (const p of ["livenessProbe", "readinessProbe"])
    if (!c[p] || !c[p].httpGet || !c[p].httpGet.path.startsWith("/v2/health/"))
      fail(where, `${p} must GET /v2/health/* (open without the token)`);
  const hpa = objects.find((o) => o.kind === "HorizontalPodAutoscaler" && o.spec.scaleTargetRef.name === d.metadata.name);
  if (!hpa) fail(where, "no HorizontalPodAutoscaler scales it");
}
const trainPolicy = objects.find((o) => o.kind === "NetworkPolicy" &&
    (o.spec.podSelector.matchLabels || {})["app.kubernetes.io/name"] === "gradmesh-train");
if (!trainPolicy) fail("NetworkPolicy", "none admits only the job's own pods to its workers");

for (const sts of objects.filter((o) => o.kind === "StatefulSet" && etcd.etcdContainer((o.spec.template || {}).spec)))
  etcd.checkCluster(ctx, sts);

// Every pod as the others: not root, no privilege to gain, requests the
// scheduler can place it by.
for (const t of podTemplates(objects)) {
  if (!(t.spec.securityContext || {}).runAsNonRoot) fail(t.where, "the pod must set securityContext.runAsNonRoot");
  for (const c of t.spec.containers || []) {
    const sc = c.securityContext || {};
    if (sc.allowPrivilegeEscalation !== false || sc.readOnlyRootFilesystem !== true ||
        !((sc.capabilities || {}).drop || []).includes("ALL"))
      fail(`${t.where} container ${c.name}`, "needs allowPrivilegeEscalation false, readOnlyRootFilesystem true and capabilities drop ALL");
    const requests = (c.resources || {}).requests || {};
    if (!requests.cpu || !requests.memory) fail(`${t.where} container ${c.name}`, "needs cpu and memory requests");
  }
}

// --- 4. on a real cluster (rules.js) ---------------------------------------------
runRules(ctx);

if (problems.length) {
  for (const p of problems) console.log(p);
  process.exit(1);
}
console.log(`${objects.length} objects valid, ${launchers} launcher containers checked`);
