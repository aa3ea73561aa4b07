// The etcd store in rendered manifests (deploy/k8s/components/etcd): the
// cluster a StatefulSet runs, and the launchers' etcd:// endpoint, which must
// name exactly its members. What the checks guard against:
//
//  - a cluster that never forms: 3, 5 or 7 members (odd: an even count adds
//    a member without surviving one more loss), started together (Parallel)
//    and found by name before any is ready (a headless Service that
//    publishes not-ready addresses); --initial-cluster gives every pod the
//    URL it advertises, its DNS name through that Service on the peer port;
//  - one that does not survive what Kubernetes does to pods: data on a
//    claim, members on different nodes, a disruption budget that keeps the
//    quorum, probes on /health whose liveness asks the member alone;
//  - launchers that miss it: --rdzv-endpoint lists every member once, by
//    its DNS name on the client port, in the cluster's scheme; the network
//    policies admit the launchers to the client port and the members to
//    each other's peer port; the user's password and TLS files as mounted files;
//  - Redis left behind: a pod that mounts the Secret of a store nobody
//    deploys any more never starts.
"use strict";
const { valueOf, selects, mountedFrom, portNumber, admits } = require("./objects");

const kMinVersion = [3, 5, 3];  // /health?serializable=true, which the liveness probe asks
const kSpreadKeys = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"];

// The container that runs etcd in a pod spec, or undefined.
function etcdContainer(pod) {
  return ((pod && pod.containers) || []).find((c) => /(^|\/)etcd$/.test((c.command || [])[0] || "") ||
      /(^|\/)etcd(:|@|$)/.test(c.image || ""));
}

function parseUrl(url) {
  const m = /^(https?):\/\/([^:/]+):(\d+)\/?$/.exec(url || "");
  return m ? { scheme: m[1], host: m[2], port: Number(m[3]) } : undefined;
}

// A StatefulSet that runs etcd, as the checks need it.
function readCluster(sts) {
  const spec = sts.spec || {};
  const container = etcdContainer((spec.template || {}).spec);
  const args = [...(container.command || []).slice(1), ...(container.args || [])];
  const first = (flag) => parseUrl((valueOf(args, flag) || "").split(",")[0]);
  const replicas = spec.replicas === undefined ? 1 : spec.replicas;
  const name = sts.metadata.name;
  return {
    sts, name, replicas, args, container,
    where: `StatefulSet/${name}`,
    service: spec.serviceName,
    pods: Array.from({ length: Number.isInteger(replicas) ? replicas : 0 }, (_, i) => `${name}-${i}`),
    labels: (spec.template.metadata || {}).labels || {},
    pod: spec.template.spec,
    client: first("--listen-client-urls"),
    peer: first("--listen-peer-urls"),
    metrics: first("--listen-metrics-urls"),
  };
}

// Whether `host` is `pod`'s DNS name through the headless Service `service`
// (pod.service, or longer with the namespace and cluster domain).
const isPodName = (host, pod, service) => host === `${pod}.${service}` || host.startsWith(`${pod}.${service}.`);

function checkFormation(ctx, c) {
  const { fail, objects } = ctx;
  if (![3, 5, 7].includes(c.replicas))
    fail(c.where, `replicas ${c.replicas}: an etcd cluster needs 3, 5 or 7 members (odd; 3 is the fewest that survive losing one)`);
  if (c.sts.spec.podManagementPolicy !== "Parallel")
    fail(c.where, "podManagementPolicy must be Parallel: in order, member 0 waits to be ready for a quorum its peers, not yet created, cannot give");
  const service = objects.find((o) => o.kind === "Service" && o.metadata.name === c.service);
  if (!service) fail(c.where, `its serviceName ${c.service} is no Service among the objects: the members get no DNS names`);
  else {
    if (service.spec.clusterIP !== "None") fail(c.where, `Service ${c.service} must be headless (clusterIP: None) to name each member`);
    if (service.spec.publishNotReadyAddresses !== true)
      fail(c.where, `Service ${c.service} must publish not-ready addresses: members must find each other before they can be ready`);
    if (!selects({ matchLabels: service.spec.selector }, c.labels)) fail(c.where, `Service ${c.service} does not select its pods`);
  }
  if (!c.client || !c.peer) return fail(c.where, "etcd needs --listen-client-urls and --listen-peer-urls as scheme://address:port");
  const ports = (c.container.ports || []).map((p) => p.containerPort);
  for (const [what, port] of [["client", c.client.port], ["peer", c.peer.port]])
    if (!ports.includes(port)) fail(c.where, `the container declares no port ${port} (etcd's ${what} port)`);

  const name = /^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$/.exec(valueOf(c.args, "--name") || "");
  const env = name && (c.container.env || []).find((e) => e.name === name[1]);
  if (!env || ((env.valueFrom || {}).fieldRef || {}).fieldPath !== "metadata.name")
    return fail(c.where, "--name must be $(VAR) with VAR the pod's name (fieldRef metadata.name): --initial-cluster names the pods");
  const advertised = (flag, pod) => (valueOf(c.args, flag) || "").split(`$(${name[1]})`).join(pod);
  const members = (valueOf(c.args, "--initial-cluster") || "").split(",").filter((m) => m).map((m) => m.split("="));
  const names = members.map((m) => m[0]);
  const missing = c.pods.filter((p) => !names.includes(p));
  const extra = names.filter((n, i) => !c.pods.includes(n) || names.indexOf(n) !== i);
  if (missing.length || extra.length)
    fail(c.where, `--initial-cluster names ${names.join(", ") || "no member"}, but the pods are ${c.pods.join(", ")}`);
  for (const [member, url] of members) {
    const expected = advertised("--initial-advertise-peer-urls", member);
    if (url !== expected)
      fail(c.where, `--initial-cluster gives ${member} the URL ${url}, but it advertises ${expected}: etcd would not start`);
  }
  for (const [flag, what, port] of [["--initial-advertise-peer-urls", "peer", c.peer.port],
                                    ["--advertise-client-urls", "client", c.client.port]]) {
    const wrong = c.pods.filter((pod) => {
      const url = parseUrl(advertised(flag, pod));
      return !url || !isPodName(url.host, pod, c.service) || url.port !== port;
    });
    if (wrong.length)
      fail(c.where, `${flag} must be each pod's DNS name through Service ${c.service} (<pod>.${c.service}) on the ${what} port ${port}; not for ${wrong.join(", ")}`);
  }
}

function checkProbes(ctx, c) {
  const httpPorts = [c.client, c.metrics].filter((u) => u && u.scheme === "http").map((u) => u.port);
  for (const p of ["livenessProbe", "readinessProbe"]) {
    const get = (c.container[p] || {}).httpGet;
    if (!get || !String(get.path).startsWith("/health") || !httpPorts.includes(portNumber(get.port, [c.container])))
      ctx.fail(c.where, `${p} must GET /health on a port etcd serves plain HTTP on (${httpPorts.join(", ") || "none"})`);
    else if (p === "livenessProbe" && !/[?&]serializable=true/.test(get.path))
      ctx.fail(c.where, "the liveness probe must ask /health?serializable=true: without it every member fails while the quorum is lost, and restarting them makes it worse");
  }
  const version = /:v?(\d+)\.(\d+)\.(\d+)(-[\w.]+)?$/.exec(c.container.image || "");
  const newer = version && [1, 2, 3].map((i) => Number(version[i]))
      .reduce((r, v, i) => (r !== 0 ? r : Math.sign(v - kMinVersion[i])), 0) >= 0;
  if (!/@sha256:/.test(c.container.image || "") && !newer)
    ctx.fail(c.where, `image ${c.container.image}: pin an etcd release, ${kMinVersion.join(".")} or later (its liveness probe needs it)`);
}

function checkSurvival(ctx, c) {
  const { fail, objects } = ctx;
  const dataDir = valueOf(c.args, "--data-dir") || "";
  const mount = (c.container.volumeMounts || []).find((m) => dataDir.startsWith(m.mountPath.replace(/\/?$/, "/")));
  if (!mount || !(c.sts.spec.volumeClaimTemplates || []).some((t) => t.metadata.name === mount.name))
    fail(c.where, `--data-dir ${dataDir} must be on a volumeClaimTemplate: a rescheduled member would come back empty and not rejoin`);

  const anti = (c.pod.affinity || {}).podAntiAffinity || {};
  const terms = [...(anti.requiredDuringSchedulingIgnoredDuringExecution || []),
                 ...(anti.preferredDuringSchedulingIgnoredDuringExecution || []).map((t) => t.podAffinityTerm)];
  if (!terms.some((t) => t && kSpreadKeys.includes(t.topologyKey) && selects(t.labelSelector, c.labels)))
    fail(c.where, "no pod anti-affinity spreads the members over nodes (topologyKey kubernetes.io/hostname, selecting the members)");
  checkProbes(ctx, c);

  const quorum = Math.floor(c.replicas / 2) + 1;
  const scaled = (v) => (/%$/.test(String(v)) ? Math.ceil((c.replicas * parseInt(v, 10)) / 100) : Number(v));
  const budgets = objects.filter((o) => o.kind === "PodDisruptionBudget" && selects(o.spec.selector, c.labels));
  if (budgets.length === 0) fail(c.where, `no PodDisruptionBudget selects the members: a drain could take ${quorum} at once`);
  for (const b of budgets) {
    const s = b.spec;
    const allowed = s.minAvailable !== undefined ? c.replicas - scaled(s.minAvailable) : scaled(s.maxUnavailable);
    if (!(allowed <= c.replicas - quorum))
      fail(`PodDisruptionBudget/${b.metadata.name}`, `lets ${allowed} of ${c.replicas} members go at once: the quorum is ${quorum} (minAvailable ${quorum})`);
    else if (!(allowed >= 1)) fail(`PodDisruptionBudget/${b.metadata.name}`, "lets no member go: every drain would block");
  }
  const peers = admits(objects, c.labels, [c.container], c.labels, c.peer ? c.peer.port : NaN);
  if (peers === "isolated-none") fail(c.where, "no NetworkPolicy selects the members: any pod could reach the store");
  else if (!peers) fail(c.where, `the network policies do not let the members reach each other's peer port ${c.peer && c.peer.port}`);
}

// Every StatefulSet that runs etcd forms a cluster that survives a node.
function checkCluster(ctx, sts) {
  const c = readCluster(sts);
  checkFormation(ctx, c);
  checkSurvival(ctx, c);
}

// The launcher's etcd secrets as files, and its TLS files only with etcds://.
function checkEtcdEnvironment(ctx, where, pod, container, scheme) {
  const env = new Map((container.env || []).map((e) => [e.name, e]));
  const file = (name) => (env.get(name) || {}).value;
  if (env.has("GRADMESH_ETCD_USER") && !env.has("GRADMESH_ETCD_PASSWORD_FILE"))
    ctx.fail(where, "GRADMESH_ETCD_USER without GRADMESH_ETCD_PASSWORD_FILE: the user's password belongs in a mounted Secret");
  if (env.has("GRADMESH_ETCD_PASSWORD_FILE") && !mountedFrom(pod, container, file("GRADMESH_ETCD_PASSWORD_FILE") || "", "secret"))
    ctx.fail(where, "GRADMESH_ETCD_PASSWORD_FILE must name a file mounted from a Secret");
  for (const name of ["GRADMESH_ETCD_CACERT", "GRADMESH_ETCD_CERT", "GRADMESH_ETCD_KEY"]) {
    if (!env.has(name)) continue;
    if (scheme !== "etcds") ctx.fail(where, `${name} with a plain etcd:// endpoint: the launcher refuses it (write etcds://)`);
    const path = file(name) || "";
    if (!mountedFrom(pod, container, path, "secret") && !(name === "GRADMESH_ETCD_CACERT" && mountedFrom(pod, container, path, "configMap")))
      ctx.fail(where, `${name} must name a file mounted from a Secret`);
  }
  if (env.has("GRADMESH_ETCD_CERT") !== env.has("GRADMESH_ETCD_KEY"))
    ctx.fail(where, "GRADMESH_ETCD_CERT and GRADMESH_ETCD_KEY go together");
}

// Nothing of a Redis store beside the etcd one the launchers use.
function checkNoRedis(ctx, where, pod, container) {
  for (const o of ctx.objects)
    if (/redis/i.test(`${o.metadata.name} ${((o.metadata.labels || {})["app.kubernetes.io/name"]) || ""}`))
      ctx.fail(`${o.kind}/${o.metadata.name}`, "a Redis store is rendered, but the launchers meet through etcd: remove it");
  for (const e of container.env || [])
    if (/^GRADMESH_REDIS_/.test(e.name)) ctx.fail(where, `${e.name} is set, but the store is etcd`);
  for (const v of pod.volumes || [])
    if (v.secret && /redis/i.test(v.secret.secretName))
      ctx.fail(where, `volume ${v.name} mounts the Secret ${v.secret.secretName}: nobody creates it beside etcd, and the pod would never start`);
}

// A launcher's --rdzv-endpoint etcd://... names every member of one etcd
// StatefulSet, once, on its client port; the launcher's pods reach them.
function checkEndpoint(ctx, where, pod, container, endpoint, labels) {
  const m = /^(etcds?):\/\/(?:[^@]*@)?(.*)$/.exec(endpoint);
  const members = m[2].split(",").map((member) => {
    const hp = /^(.*?)(?::(\d+))?$/.exec(member);
    return { host: hp[1], port: Number(hp[2] || 2379), text: member };
  });
  const clusters = ctx.objects.filter((o) => o.kind === "StatefulSet" && etcdContainer((o.spec.template || {}).spec)).map(readCluster);
  const [firstPod, firstService] = members[0].host.split(".");
  const c = clusters.find((k) => k.service === firstService && k.pods.includes(firstPod));
  if (!c) return ctx.fail(where, `--rdzv-endpoint ${endpoint}: ${members[0].host} is no member of an etcd StatefulSet (<pod>.<headless Service>)`);
  const listed = [];
  for (const member of members) {
    const pod = c.pods.find((p) => isPodName(member.host, p, c.service));
    if (!pod) ctx.fail(where, `--rdzv-endpoint names ${member.text}, no member of ${c.where} (${c.pods.join(", ")})`);
    else if (listed.includes(pod)) ctx.fail(where, `--rdzv-endpoint names ${pod} twice`);
    else listed.push(pod);
    if (c.client && member.port !== c.client.port)
      ctx.fail(where, `--rdzv-endpoint names ${member.text}, but the members serve clients on port ${c.client.port}`);
  }
  const missing = c.pods.filter((p) => !listed.includes(p));
  if (missing.length)
    ctx.fail(where, `--rdzv-endpoint leaves out ${missing.join(", ")}: the store fails over only to the members it lists`);
  if (c.client && (m[1] === "etcds") !== (c.client.scheme === "https"))
    ctx.fail(where, `--rdzv-endpoint is ${m[1]}://, but the members serve ${c.client.scheme}`);
  checkEtcdEnvironment(ctx, where, pod, container, m[1]);
  checkNoRedis(ctx, where, pod, container);
  const reach = admits(ctx.objects, c.labels, [c.container], labels, c.client ? c.client.port : NaN);
  if (reach === "isolated-none") ctx.fail(c.where, "no NetworkPolicy selects the members: any pod could reach the store");
  else if (!reach) ctx.fail(where, `the network policies do not let the launchers reach the members' client port ${c.client && c.client.port}`);
}

module.exports = { etcdContainer, checkCluster, checkEndpoint };
