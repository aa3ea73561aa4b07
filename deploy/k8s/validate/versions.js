// The oldest Kubernetes the manifests run on, and what needs it.
//
// Every object states it in the annotation gradmesh.dev/min-kubernetes-version
// (base/kustomization.yaml and each component set it with commonAnnotations);
// the statements agree, and each feature an object uses (the table below: the
// release that first runs it without a feature gate to switch on) is no newer
// than the version that object states. A feature added to the manifests
// without a line here goes unchecked: the table lists what they use and
// what they are likely to use next.
"use strict";
const { podTemplates, allContainers } = require("./objects");

const kAnnotation = "gradmesh.dev/min-kubernetes-version";

// The pod specs an object holds (a Job's template, each PyTorchJob role's).
const podsOf = (o) => podTemplates([o]).map((t) => t.spec);
const spreads = (o) => podsOf(o).flatMap((p) => p.topologySpreadConstraints || []);
const mentions = (o, text) => JSON.stringify(o).includes(text);

const kFeatures = [
  { feature: "the Job label batch.kubernetes.io/controller-uid (the run id)", since: "1.27",
    used: (o) => mentions(o, "batch.kubernetes.io/controller-uid") },
  { feature: "the pod label batch.kubernetes.io/job-completion-index", since: "1.28",
    used: (o) => mentions(o, "batch.kubernetes.io/job-completion-index") },
  { feature: "Indexed Jobs (completionMode: Indexed)", since: "1.24",
    used: (o) => o.kind === "Job" && (o.spec || {}).completionMode === "Indexed" },
  { feature: "Job podFailurePolicy (beta, on by default)", since: "1.26",
    used: (o) => o.kind === "Job" && (o.spec || {}).podFailurePolicy !== undefined },
  { feature: "Job backoffLimitPerIndex", since: "1.29",
    used: (o) => o.kind === "Job" && (o.spec || {}).backoffLimitPerIndex !== undefined },
  { feature: "Job podReplacementPolicy", since: "1.29",
    used: (o) => o.kind === "Job" && (o.spec || {}).podReplacementPolicy !== undefined },
  { feature: "Job successPolicy", since: "1.31",
    used: (o) => o.kind === "Job" && (o.spec || {}).successPolicy !== undefined },
  { feature: "sidecar containers (an init container with restartPolicy Always)", since: "1.29",
    used: (o) => podsOf(o).some((p) => (p.initContainers || []).some((c) => c.restartPolicy === "Always")) },
  { feature: "topologySpreadConstraints", since: "1.19", used: (o) => spreads(o).length > 0 },
  { feature: "topologySpreadConstraints nodeAffinityPolicy/nodeTaintsPolicy (beta, on by default)", since: "1.26",
    used: (o) => spreads(o).some((s) => s.nodeAffinityPolicy !== undefined || s.nodeTaintsPolicy !== undefined) },
  { feature: "topologySpreadConstraints matchLabelKeys (beta, on by default)", since: "1.27",
    used: (o) => spreads(o).some((s) => s.matchLabelKeys !== undefined) },
  { feature: "topologySpreadConstraints minDomains (beta, on by default)", since: "1.27",
    used: (o) => spreads(o).some((s) => s.minDomains !== undefined) },
  { feature: "a memory-backed emptyDir sized by its sizeLimit", since: "1.22",
    used: (o) => podsOf(o).some((p) => (p.volumes || []).some((v) => v.emptyDir && v.emptyDir.medium === "Memory" && v.emptyDir.sizeLimit)) },
  { feature: "fsGroupChangePolicy", since: "1.23",
    used: (o) => podsOf(o).some((p) => (p.securityContext || {}).fsGroupChangePolicy !== undefined) },
  { feature: "seccompProfile", since: "1.19",
    used: (o) => podsOf(o).some((p) => (p.securityContext || {}).seccompProfile !== undefined ||
                                       allContainers(p).some(({ container }) => (container.securityContext || {}).seccompProfile)) },
  { feature: "StatefulSet persistentVolumeClaimRetentionPolicy (beta, on by default)", since: "1.27",
    used: (o) => o.kind === "StatefulSet" && (o.spec || {}).persistentVolumeClaimRetentionPolicy !== undefined },
  { feature: "policy/v1 PodDisruptionBudget", since: "1.21", used: (o) => o.apiVersion === "policy/v1" },
  { feature: "PodDisruptionBudget unhealthyPodEvictionPolicy (beta, on by default)", since: "1.27",
    used: (o) => o.kind === "PodDisruptionBudget" && (o.spec || {}).unhealthyPodEvictionPolicy !== undefined },
  { feature: "autoscaling/v2 HorizontalPodAutoscaler", since: "1.23", used: (o) => o.apiVersion === "autoscaling/v2" },
  { feature: "the namespace label kubernetes.io/metadata.name", since: "1.22",
    used: (o) => o.kind === "NetworkPolicy" && mentions(o, "kubernetes.io/metadata.name") },
  { feature: "NetworkPolicy endPort", since: "1.25", used: (o) => o.kind === "NetworkPolicy" && mentions(o, "\"endPort\"") },
];

const parse = (v) => {
  const m = /^v?(\d+)\.(\d+)$/.exec(String(v));
  return m ? [Number(m[1]), Number(m[2])] : undefined;
};
const older = (a, b) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

// The rule `min-version` (rules.js lists it).
function checkVersions(ctx, id) {
  const stated = new Map();  // version -> first object stating it
  for (const o of ctx.objects) {
    const where = `${o.kind}/${o.metadata.name}`;
    const text = ((o.metadata || {}).annotations || {})[kAnnotation];
    const version = parse(text);
    if (!version) {
      ctx.fail(where, `states no ${kAnnotation} ("1.27"): the oldest Kubernetes it runs on`, id);
      continue;
    }
    if (!stated.has(text)) stated.set(text, where);
    for (const f of kFeatures)
      if (older(version, parse(f.since)) && f.used(o))
        ctx.fail(where, `uses ${f.feature}, which needs Kubernetes ${f.since}, but states ${kAnnotation} ${text}`, id);
  }
  if (stated.size > 1)
    ctx.fail("objects", `state different ${kAnnotation}: ${[...stated].map(([v, w]) => `${v} (${w})`).join(", ")}`, id);
}

module.exports = { kFeatures, checkVersions };
