// Questions validate.js and etcd.js ask of rendered Kubernetes objects: an
// argument's value, which pods a selector picks, what a mount comes from,
// and whether the network policies let one pod reach another's port. Each
// answers from the objects alone, as the API server and the network plugin
// would read them; nothing here reports a problem.
"use strict";

// The value of `--flag=value` or `--flag value` in an argument list.
function valueOf(list, flag) {
  for (let i = 0; i < list.length; i++) {
    if (list[i].startsWith(flag + "=")) return list[i].slice(flag.length + 1);
    if (list[i] === flag) return list[i + 1];
  }
  return undefined;
}

// Whether a label selector ({matchLabels, matchExpressions}) picks a pod with
// these labels. An empty selector picks every pod, a missing one none.
function selects(selector, labels) {
  if (!selector) return false;
  labels = labels || {};
  for (const [key, value] of Object.entries(selector.matchLabels || {})) if (labels[key] !== value) return false;
  for (const e of selector.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const inValues = has && (e.values || []).includes(labels[e.key]);
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

// Every pod template among the objects: [{where, labels, annotations, spec,
// object}], `object` the Deployment, Job, ... that holds it.
function podTemplates(objects) {
  const templates = [];
  const add = (where, template, object) => {
    const meta = (template && template.metadata) || {};
    templates.push({ where, labels: meta.labels || {}, annotations: meta.annotations || {},
                     spec: (template && template.spec) || {}, object });
  };
  for (const o of objects) {
    const name = `${o.kind}/${o.metadata && o.metadata.name}`;
    if (["Deployment", "StatefulSet", "Job", "DaemonSet"].includes(o.kind) && o.spec && o.spec.template)
      add(name, o.spec.template, o);
    if (o.kind === "PyTorchJob")
      for (const [role, spec] of Object.entries((o.spec || {}).pytorchReplicaSpecs || {}))
        add(`${name} ${role}`, spec.template, o);
  }
  return templates;
}

// A pod spec's containers, init containers included: [{kind, container}].
function allContainers(pod) {
  return [...(pod.initContainers || []).map((c) => ({ kind: "init container", container: c })),
          ...(pod.containers || []).map((c) => ({ kind: "container", container: c }))];
}

// A resource quantity ("500m", "4", "8Gi", "1G") in its base unit (cores,
// bytes); NaN when it is none.
function quantity(q) {
  const m = /^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(String(q === undefined ? "" : q));
  if (!m) return NaN;
  const scale = { m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
  return Number(m[1]) * (m[2] ? scale[m[2]] : 1);
}

// The volume of this kind (secret, configMap, persistentVolumeClaim, ...)
// that the directory holding `path` is mounted from, or undefined.
function mountedFrom(pod, container, path, kind) {
  const mount = (container.volumeMounts || []).find((m) => path.startsWith(m.mountPath.replace(/\/?$/, "/")));
  if (!mount) return undefined;
  const volume = (pod.volumes || []).find((v) => v.name === mount.name);
  return volume && volume[kind] ? volume[kind] : undefined;
}

// A container port's number, from a number or a port name.
function portNumber(port, containers) {
  if (typeof port === "number") return port;
  if (/^\d+$/.test(String(port))) return Number(port);
  for (const c of containers || []) for (const p of c.ports || []) if (p.name === port) return p.containerPort;
  return undefined;
}

// Whether the NetworkPolicies let pods labelled `from` open TCP connections to
// `port` of pods labelled `to` (whose containers name their ports), all in one
// namespace: "isolated-none" when no policy selects the target pods for
// ingress (the cluster's default, everything, applies), else true or false.
function admits(objects, to, containers, from, port) {
  const policies = objects.filter((o) => o.kind === "NetworkPolicy" && selects(o.spec.podSelector, to) &&
      (!o.spec.policyTypes || o.spec.policyTypes.includes("Ingress")));
  if (policies.length === 0) return "isolated-none";
  const peerMatches = (peer) => peer.podSelector !== undefined && selects(peer.podSelector, from);
  const portMatches = (p) => (p.protocol || "TCP") === "TCP" && (p.port === undefined ||
      (p.endPort ? port >= portNumber(p.port, containers) && port <= p.endPort : portNumber(p.port, containers) === port));
  return policies.some((policy) => (policy.spec.ingress || []).some((rule) =>
      (!rule.from || rule.from.length === 0 || rule.from.some(peerMatches)) &&
      (!rule.ports || rule.ports.length === 0 || rule.ports.some(portMatches))));
}

module.exports = { valueOf, selects, podTemplates, allContainers, quantity, mountedFrom, portNumber, admits };
