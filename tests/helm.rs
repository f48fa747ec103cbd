//! The Helm chart `charts/arca`, rendered by the real helm (`make deps` installs it into
//! `.tools/bin/helm` through scripts/helm.sh; `HELM_BIN` points elsewhere): `helm lint
//! --strict` and `helm template` with the chart's value sets, then what came out, object by
//! object. Each group's config file goes through arca's own loader with the environment and
//! arguments its Deployment gives it; the wiring between groups is followed from a registry
//! entry to the headless Service, its pods and the endpoint they listen on; and the real binary
//! runs on the rendered files. Values that cannot work must make `helm template` fail with a
//! line naming the value.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use arca_config::{BlobsConfig, Config, Overrides, RegistryKind};
use arca_tests::{Launch, Server, TempDir, eventually, free_addr, get};
use arca_transport::Endpoint;
use base64::Engine as _;
use yaml_rust2::{Yaml, YamlLoader};

/// Deadline for states that take milliseconds when all is well.
const WITHIN: Duration = Duration::from_secs(20);
const RELEASE: &str = "demo";
const NAMESPACE: &str = "files";
/// What the chart's values call the cluster's DNS domain by default.
const CLUSTER_DOMAIN: &str = "cluster.local";
/// What the test stands in for values Kubernetes would supply: `status.podIP`, and the keys of
/// Secrets the chart is told about but does not render.
const POD_IP: &str = "10.1.2.3";
const DATABASE_URL: &str = "postgres://arca:pw@postgres.db.svc:5432/arca";
const SECRET_VALUE: &str = "from-an-existing-secret-0123456789";

/// Who calls whom, from the host's catalog (the chart keeps the same table; the binary, run on
/// the rendered files below, refuses a config missing one).
fn dependencies(service: &str) -> &'static [&'static str] {
    arca_host::CATALOG
        .iter()
        .find(|e| e.name == service)
        .map_or(&[], |e| e.dependencies)
}

/// Whether `caller` calls `service`: a dependency, or an optional call
/// (`arca_host::OPTIONAL_CALLS`), which is routed the same but waited for by nobody.
fn calls(caller: &str, service: &str) -> bool {
    dependencies(caller).contains(&service)
        || arca_host::OPTIONAL_CALLS.contains(&(caller, service))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_owned()
}

fn chart() -> PathBuf {
    workspace().join("charts/arca")
}

fn value_file(name: &str) -> String {
    chart().join("ci").join(name).display().to_string()
}

/// The helm binary with cache, config and data homes of its own, so nothing of the user's
/// (repositories, plugins) takes part.
struct Helm {
    bin: PathBuf,
    home: TempDir,
}

impl Helm {
    fn new() -> Self {
        let bin = std::env::var_os("HELM_BIN")
            .map_or_else(|| workspace().join(".tools/bin/helm"), PathBuf::from);
        assert!(
            bin.is_file(),
            "{} not found: run `make deps` (scripts/helm.sh installs helm) or set HELM_BIN",
            bin.display()
        );
        Self {
            bin,
            home: TempDir::new(),
        }
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            cmd.env(var, self.home.join(dir));
        }
        cmd.output()
            .with_context(|| format!("run {} {args:?}", self.bin.display()))
    }

    /// `helm template` of the chart with `extra` arguments (`-f FILE`, `--set K=V`).
    fn template(&self, extra: &[&str]) -> anyhow::Result<Output> {
        let chart = chart().display().to_string();
        let mut args = vec!["template", RELEASE, &chart, "--namespace", NAMESPACE];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// [`Helm::template`] that must succeed, parsed.
    fn render(&self, extra: &[&str]) -> anyhow::Result<Manifests> {
        let out = self.template(extra)?;
        ensure!(
            out.status.success(),
            "helm template {extra:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Manifests::parse(&String::from_utf8(out.stdout)?)
    }
}

/// The objects `helm template` printed.
struct Manifests {
    docs: Vec<Yaml>,
}

impl Manifests {
    fn parse(text: &str) -> anyhow::Result<Self> {
        let docs = YamlLoader::load_from_str(text)
            .context("helm template printed YAML that does not parse")?
            .into_iter()
            .filter(|d| !d.is_null())
            .collect::<Vec<_>>();
        for d in &docs {
            ensure!(
                d["kind"].as_str().is_some() && d["metadata"]["name"].as_str().is_some(),
                "an object without kind or name: {d:?}"
            );
        }
        Ok(Self { docs })
    }

    fn all<'a>(&'a self, kind: &str) -> impl Iterator<Item = &'a Yaml> + use<'a> {
        let kind = kind.to_owned();
        self.docs
            .iter()
            .filter(move |d| d["kind"].as_str() == Some(kind.as_str()))
    }

    fn find(&self, kind: &str, name: &str) -> Option<&Yaml> {
        self.all(kind).find(|d| name_of(d) == name)
    }

    fn get(&self, kind: &str, name: &str) -> anyhow::Result<&Yaml> {
        self.find(kind, name)
            .with_context(|| format!("no {kind} {name} rendered"))
    }

    fn names(&self, kind: &str) -> BTreeSet<String> {
        self.all(kind).map(|d| name_of(d).to_owned()).collect()
    }
}

fn name_of(doc: &Yaml) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

fn text<'a>(y: &'a Yaml, what: &str) -> anyhow::Result<&'a str> {
    y.as_str()
        .with_context(|| format!("{what}: not a string: {y:?}"))
}

fn int(y: &Yaml, what: &str) -> anyhow::Result<i64> {
    y.as_i64()
        .with_context(|| format!("{what}: not an integer: {y:?}"))
}

fn list<'a>(y: &'a Yaml, what: &str) -> anyhow::Result<&'a [Yaml]> {
    y.as_vec()
        .map(Vec::as_slice)
        .with_context(|| format!("{what}: not a list: {y:?}"))
}

fn strings(y: &Yaml, what: &str) -> anyhow::Result<Vec<String>> {
    list(y, what)?
        .iter()
        .map(|s| text(s, what).map(str::to_owned))
        .collect()
}

/// The port of a `HOST:PORT`.
fn port_of(addr: &str) -> anyhow::Result<i64> {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .with_context(|| format!("{addr:?} has no port"))
}

/// A map of strings (labels, selectors) as a BTreeMap.
fn string_map(y: &Yaml, what: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let hash = y
        .as_hash()
        .with_context(|| format!("{what}: not a map: {y:?}"))?;
    hash.iter()
        .map(|(k, v)| Ok((text(k, what)?.to_owned(), text(v, what)?.to_owned())))
        .collect()
}

/// One Deployment of the rendered chart and the arca process it would run.
struct Group {
    name: String,
    deployment: Yaml,
    /// The config file from its ConfigMap, as rendered.
    file: String,
    /// `services` as the ConfigMap's YAML lists them.
    listed: Vec<String>,
    /// The container's environment, Secrets and the pod IP resolved (see [`POD_IP`]).
    env: Vec<(String, String)>,
    /// `arca server` arguments after `--config FILE`, `$(POD_IP)` expanded.
    extra_args: Vec<String>,
    /// The config the binary would run with: the file, its environment and its arguments
    /// through arca's own loader.
    config: Config,
}

impl Group {
    fn container(&self) -> &Yaml {
        &self.deployment["spec"]["template"]["spec"]["containers"][0]
    }

    fn pod_spec(&self) -> &Yaml {
        &self.deployment["spec"]["template"]["spec"]
    }

    fn pod_labels(&self) -> anyhow::Result<BTreeMap<String, String>> {
        string_map(
            &self.deployment["spec"]["template"]["metadata"]["labels"],
            "pod labels",
        )
    }

    /// The containerPort of the port named `name`.
    fn container_port(&self, name: &str) -> anyhow::Result<i64> {
        let ports = list(&self.container()["ports"], "container ports")?;
        let port = ports
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .with_context(|| format!("group {}: no container port named {name}", self.name))?;
        int(&port["containerPort"], "containerPort")
    }

    fn hosts(&self, service: &str) -> bool {
        self.config.hosts(service)
    }

    /// Whether a storage service of this group keeps SQLite metadata or local blobs on the
    /// pod's volume.
    fn keeps_local_state(&self) -> bool {
        [
            ("storage-users", &self.config.storage_users),
            ("storage-system", &self.config.storage_system),
        ]
        .into_iter()
        .any(|(name, s)| {
            self.hosts(name) && (s.database.is_none() || s.blobs == Some(BlobsConfig::Local))
        })
    }
}

/// The value a container env var gets: literal, from a rendered Secret (decoded as the kubelet
/// would), a stand-in for a Secret the chart only refers to, or the pod IP.
fn env_value(var: &Yaml, manifests: &Manifests) -> anyhow::Result<(String, String)> {
    let name = text(&var["name"], "env name")?.to_owned();
    if let Some(value) = var["value"].as_str() {
        return Ok((name, value.to_owned()));
    }
    let from = &var["valueFrom"];
    if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
        ensure!(path == "status.podIP", "{name}: unexpected fieldRef {path}");
        return Ok((name, POD_IP.to_owned()));
    }
    let secret = text(&from["secretKeyRef"]["name"], "secretKeyRef.name")?;
    let key = text(&from["secretKeyRef"]["key"], "secretKeyRef.key")?;
    let value = match manifests.find("Secret", secret) {
        Some(doc) => {
            let data = text(&doc["data"][key], &format!("Secret {secret} key {key}"))?;
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data)?)?
        }
        None if name.ends_with("_DATABASE") => DATABASE_URL.to_owned(),
        None => SECRET_VALUE.to_owned(),
    };
    Ok((name, value))
}

/// Every Deployment of `manifests` as a [`Group`], its config loaded as the binary would.
fn groups(manifests: &Manifests, scratch: &TempDir) -> anyhow::Result<BTreeMap<String, Group>> {
    let mut out = BTreeMap::new();
    for deployment in manifests.all("Deployment") {
        let name = name_of(deployment)
            .strip_prefix(&format!("{RELEASE}-arca-"))
            .with_context(|| {
                format!(
                    "Deployment {} not named {RELEASE}-arca-GROUP",
                    name_of(deployment)
                )
            })?
            .to_owned();
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args = strings(&container["args"], "args")?;
        ensure!(
            args.len() >= 3 && args[..3] == ["server", "--config", "/etc/arca/arca.yaml"],
            "group {name}: args {args:?} do not start with server --config /etc/arca/arca.yaml"
        );
        // The config file is the ConfigMap the volume mounted at that path names.
        let mounts = list(&container["volumeMounts"], "volumeMounts")?;
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"].as_str() == Some("/etc/arca/arca.yaml"))
            .context("nothing mounted at /etc/arca/arca.yaml")?;
        let volume_name = text(&mount["name"], "volumeMount name")?;
        let volumes = list(&pod["volumes"], "volumes")?;
        let volume = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(volume_name))
            .with_context(|| format!("no volume {volume_name}"))?;
        let map_name = text(&volume["configMap"]["name"], "configMap volume")?;
        let key = text(&mount["subPath"], "subPath")?;
        let file = text(
            &manifests.get("ConfigMap", map_name)?["data"][key],
            "ConfigMap data",
        )?
        .to_owned();
        let parsed = YamlLoader::load_from_str(&file)
            .with_context(|| format!("group {name}: its config is not YAML"))?;
        let listed = strings(&parsed[0]["services"], "services")?;

        let env = list(&container["env"], "env")?
            .iter()
            .map(|v| env_value(v, manifests))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let extra_args: Vec<String> = args[3..]
            .iter()
            .map(|a| a.replace("$(POD_IP)", POD_IP))
            .collect();
        let mut overrides = Overrides::default();
        let mut rest = extra_args.iter();
        while let Some(arg) = rest.next() {
            ensure!(arg == "--set", "group {name}: unexpected argument {arg:?}");
            let assignment = rest.next().context("--set without a value")?;
            overrides.push_set(assignment)?;
        }
        let path = scratch.join(&format!("{name}.yaml"));
        std::fs::write(&path, &file)?;
        let config = arca_config::load(Some(&path), env.clone(), overrides)
            .with_context(|| format!("group {name}: arca refuses its config:\n{file}"))?;
        out.insert(
            name.clone(),
            Group {
                name,
                deployment: deployment.clone(),
                file,
                listed,
                env,
                extra_args,
                config,
            },
        );
    }
    Ok(out)
}

/// What a value set must produce: group → the services it hosts, in arca's start order.
fn expect_groups(expected: &[(&str, &[&str])], groups: &BTreeMap<String, Group>) {
    let want: BTreeMap<&str, Vec<String>> = expected
        .iter()
        .map(|(g, s)| (*g, s.iter().map(|s| (*s).to_owned()).collect()))
        .collect();
    let got: BTreeMap<&str, Vec<String>> = groups
        .iter()
        .map(|(g, group)| (g.as_str(), group.listed.clone()))
        .collect();
    assert_eq!(got, want, "groups and the services their ConfigMaps list");
    for group in groups.values() {
        assert_eq!(
            group.config.services, group.listed,
            "group {}: loaded services",
            group.name
        );
    }
}

/// Checks every group of `manifests` and the wiring between them; returns the groups.
fn check(manifests: &Manifests, scratch: &TempDir) -> anyhow::Result<BTreeMap<String, Group>> {
    let groups = groups(manifests, scratch)?;
    ensure!(!groups.is_empty(), "no Deployment rendered");

    // Each service runs in exactly one group.
    let mut owner: BTreeMap<&str, &Group> = BTreeMap::new();
    for group in groups.values() {
        for s in &group.config.services {
            if let Some(other) = owner.insert(s, group) {
                bail!("{s} hosted by both {} and {}", other.name, group.name);
            }
        }
    }
    for s in arca_host::CATALOG.iter().map(|e| e.name) {
        ensure!(owner.contains_key(s), "no group hosts {s}");
    }

    let mut headless_wanted = BTreeSet::new();
    // Group -> the groups whose readiness its own waits for (see `check_readiness`).
    let mut waits: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for group in groups.values() {
        waits.entry(&group.name).or_default();
        check_pod(group, manifests)?;
        for service in &group.config.services {
            let endpoint = group.config.endpoint(service).context("endpoint")?;
            let called_from_outside = groups.values().any(|g| {
                g.name != group.name && g.config.services.iter().any(|s| calls(s, service))
            });
            if !called_from_outside {
                // Services of one pod talk in memory.
                ensure!(
                    matches!(endpoint, Endpoint::Mem(_)),
                    "group {}: {service} is only called inside the pod but listens on {endpoint}",
                    group.name
                );
                continue;
            }
            headless_wanted.insert(format!("{RELEASE}-arca-{}", group.name));
            for dep_of in groups.values().filter(|g| g.name != group.name) {
                for caller in &dep_of.config.services {
                    if !calls(caller, service) {
                        continue;
                    }
                    match check_route(dep_of, service, group, manifests)? {
                        Route::Service { name, ready_only } => {
                            headless_wanted.insert(name);
                            // An optional call never holds its caller's readiness.
                            if ready_only && dependencies(caller).contains(&service.as_str()) {
                                waits.entry(&dep_of.name).or_default().insert(&group.name);
                            }
                        }
                        Route::Registered => {}
                    }
                }
            }
        }
    }

    check_readiness(&waits)?;

    // Headless Services exactly for the groups called from other groups, and those the
    // registries name.
    let headless: BTreeSet<String> = manifests
        .all("Service")
        .filter(|s| s["spec"]["clusterIP"].as_str() == Some("None"))
        .map(|s| name_of(s).to_owned())
        .collect();
    ensure!(
        headless == headless_wanted,
        "headless Services {headless:?}, wanted {headless_wanted:?}"
    );

    // One public Service, in front of the proxy's pods and its http port.
    let public: Vec<&Yaml> = manifests
        .all("Service")
        .filter(|s| s["spec"]["clusterIP"].as_str() != Some("None"))
        .collect();
    ensure!(
        public.len() == 1,
        "public Services: {:?}",
        public.iter().map(|s| name_of(s)).collect::<Vec<_>>()
    );
    let proxy = owner["proxy"];
    ensure!(
        selects(public[0], proxy)?,
        "the public Service does not select the pods of group {}",
        proxy.name
    );
    let public_ports = list(&public[0]["spec"]["ports"], "ports")?;
    ensure!(
        public_ports.len() == 1 && public_ports[0]["targetPort"].as_str() == Some("http"),
        "public Service ports {public_ports:?}"
    );
    ensure!(
        proxy.container_port("http")? == port_of(&proxy.config.proxy.http.addr)?,
        "the http container port is not proxy.http.addr {}",
        proxy.config.proxy.http.addr
    );
    for ingress in manifests.all("Ingress") {
        for rule in list(&ingress["spec"]["rules"], "rules")? {
            for path in list(&rule["http"]["paths"], "paths")? {
                let backend = &path["backend"]["service"];
                ensure!(
                    backend["name"].as_str() == Some(name_of(public[0]))
                        && backend["port"]["name"].as_str() == Some("http"),
                    "Ingress backend {backend:?} is not the public Service"
                );
            }
        }
    }
    Ok(groups)
}

/// Probes, shutdown timing, security and the data volume of one group's pods.
fn check_pod(group: &Group, manifests: &Manifests) -> anyhow::Result<()> {
    let name = &group.name;
    let container = group.container();
    let debug_port = port_of(&group.config.debug.addr)?;
    ensure!(
        group.container_port("debug")? == debug_port,
        "group {name}: the debug container port is not debug.addr {}",
        group.config.debug.addr
    );
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        ensure!(
            get["path"].as_str() == Some(path) && get["port"].as_str() == Some("debug"),
            "group {name}: {probe} is {get:?}, wanted {path} on the debug port"
        );
    }

    // The pod must be given the time arca takes to stop: preStop, drain, shutdown deadline.
    let grace = int(
        &group.pod_spec()["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    )?;
    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap_or(0);
    let needed = Duration::from_secs(pre_stop.try_into()?)
        + group.config.shutdown.drain_delay
        + group.config.shutdown.timeout;
    ensure!(
        Duration::from_secs(grace.try_into()?) > needed,
        "group {name}: terminationGracePeriodSeconds {grace} leaves no margin over preStop + \
         drain_delay + timeout = {needed:?}"
    );

    let pod = group.pod_spec();
    ensure!(
        pod["securityContext"]["runAsNonRoot"].as_bool() == Some(true)
            && container["securityContext"]["readOnlyRootFilesystem"].as_bool() == Some(true)
            && container["securityContext"]["allowPrivilegeEscalation"].as_bool() == Some(false),
        "group {name}: not non-root with a read-only root file system"
    );

    // data_dir is a writable volume: a claim if storage lives there, else scratch space.
    let data_dir = group.config.data_dir.display().to_string();
    let mount = list(&container["volumeMounts"], "volumeMounts")?
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(data_dir.as_str()))
        .with_context(|| format!("group {name}: nothing mounted at data_dir {data_dir}"))?;
    ensure!(
        mount["readOnly"].as_bool() != Some(true),
        "group {name}: data_dir is read-only"
    );
    let volume_name = text(&mount["name"], "mount name")?;
    let volume = list(&pod["volumes"], "volumes")?
        .iter()
        .find(|v| v["name"].as_str() == Some(volume_name))
        .context("data volume")?;
    let replicas = group.deployment["spec"]["replicas"].as_i64();
    let hpa = manifests.find("HorizontalPodAutoscaler", name_of(&group.deployment));
    if group.keeps_local_state() {
        let claim = text(
            &volume["persistentVolumeClaim"]["claimName"],
            &format!("group {name}: the data volume of local storage"),
        )?;
        manifests.get("PersistentVolumeClaim", claim)?;
        ensure!(
            replicas == Some(1) && hpa.is_none(),
            "group {name}: local storage with replicas {replicas:?} / an HPA"
        );
        ensure!(
            group.deployment["spec"]["strategy"]["type"].as_str() == Some("Recreate"),
            "group {name}: its ReadWriteOnce volume needs the Recreate strategy"
        );
    } else {
        ensure!(
            !volume["emptyDir"].is_badvalue(),
            "group {name}: stateless, yet its data volume is {volume:?}"
        );
    }
    match hpa {
        Some(hpa) => ensure!(
            replicas.is_none()
                && hpa["spec"]["scaleTargetRef"]["name"].as_str()
                    == Some(name_of(&group.deployment)),
            "group {name}: an HPA, yet replicas {replicas:?} or a wrong target"
        ),
        None => ensure!(replicas.is_some(), "group {name}: no replicas and no HPA"),
    }
    // A budget wherever a group can have several pods.
    let several = hpa.is_some() || replicas.is_some_and(|r| r > 1);
    let pdb = manifests.find("PodDisruptionBudget", name_of(&group.deployment));
    ensure!(
        pdb.is_some() == several,
        "group {name}: several pods {several}, PodDisruptionBudget {}",
        pdb.is_some()
    );
    if let Some(pdb) = pdb {
        let selector = string_map(&pdb["spec"]["selector"]["matchLabels"], "PDB selector")?;
        let labels = group.pod_labels()?;
        ensure!(
            selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
            "group {name}: its PodDisruptionBudget does not select its pods"
        );
    }
    Ok(())
}

/// Whether `service` (a Service object) selects the pods of `group`.
fn selects(service: &Yaml, group: &Group) -> anyhow::Result<bool> {
    let selector = string_map(&service["spec"]["selector"], "selector")?;
    let labels = group.pod_labels()?;
    Ok(!selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// How one group finds a service of another.
enum Route {
    /// Through this headless Service; `ready_only` unless it publishes pods that are not ready.
    Service { name: String, ready_only: bool },
    /// Through NATS, where each service registers itself once it serves.
    Registered,
}

/// `caller`'s group reaches `service`, hosted by `host`: its registry names a headless Service
/// of `host`'s pods on the port `host` listens on for `service` (DNS and static), or both use
/// NATS and `host` listens on its pod IP (the address it registers).
fn check_route(
    caller: &Group,
    service: &str,
    host: &Group,
    manifests: &Manifests,
) -> anyhow::Result<Route> {
    let route = format!("{} -> {service} (group {})", caller.name, host.name);
    let Some(Endpoint::Tcp(listen)) = host.config.endpoint(service) else {
        bail!("{route}: {service} does not listen on TCP");
    };
    let port = port_of(listen)?;
    ensure!(
        host.container_port(service)? == port,
        "{route}: container port {service} is not the endpoint's {listen}"
    );
    let target = match caller.config.registry.kind {
        RegistryKind::Dns => caller.config.registry.dns.names.get(service).cloned(),
        RegistryKind::Static => caller
            .config
            .registry
            .static_endpoints
            .get(service)
            .and_then(|eps| eps.first())
            .map(|ep| ep.to_string().trim_start_matches("tcp://").to_owned()),
        RegistryKind::Nats => {
            ensure!(
                host.config.registry.kind == RegistryKind::Nats
                    && host.config.registry.nats.url == caller.config.registry.nats.url,
                "{route}: the two groups use different registries"
            );
            ensure!(
                listen == &format!("{POD_IP}:{port}"),
                "{route}: with NATS {service} must listen on (and so register) the pod IP, not {listen}"
            );
            return Ok(Route::Registered);
        }
        RegistryKind::Memory => bail!("{route}: the in-memory registry cannot reach another pod"),
    };
    let target = target.with_context(|| format!("{route}: not in the registry"))?;
    ensure!(
        listen == &format!("0.0.0.0:{port}"),
        "{route}: {service} listens on {listen}, not on all interfaces"
    );
    let (host_name, target_port) = target
        .rsplit_once(':')
        .with_context(|| format!("{route}: {target}"))?;
    let svc_name = host_name
        .strip_suffix(&format!(".{NAMESPACE}.svc.{CLUSTER_DOMAIN}"))
        .with_context(|| {
            format!("{route}: {host_name} is not a Service of namespace {NAMESPACE}")
        })?;
    let svc = manifests.get("Service", svc_name)?;
    ensure!(
        svc["spec"]["clusterIP"].as_str() == Some("None"),
        "{route}: Service {svc_name} is not headless"
    );
    ensure!(
        selects(svc, host)?,
        "{route}: Service {svc_name} does not select group {}",
        host.name
    );
    let ports = list(&svc["spec"]["ports"], "Service ports")?;
    ensure!(
        ports.iter().any(|p| p["port"].as_i64() == Some(port)
            && p["targetPort"].as_str() == Some(service)
            && target_port == port.to_string()),
        "{route}: Service {svc_name} has no port {port} to {service} ({target})"
    );
    Ok(Route::Service {
        name: svc_name.to_owned(),
        ready_only: svc["spec"]["publishNotReadyAddresses"].as_bool() != Some(true),
    })
}

/// Plays Kubernetes' part: a pod is ready once every service it calls elsewhere answers, and a
/// headless Service that publishes only ready pods answers for a group only once that group is
/// ready. Starting from nothing ready, every group must get there: groups waiting on each
/// other in a cycle would stay unready forever.
fn check_readiness(waits: &BTreeMap<&str, BTreeSet<&str>>) -> anyhow::Result<()> {
    let mut ready: BTreeSet<&str> = BTreeSet::new();
    loop {
        let now: Vec<&str> = waits
            .iter()
            .filter(|(g, on)| !ready.contains(*g) && on.iter().all(|h| ready.contains(h)))
            .map(|(g, _)| *g)
            .collect();
        if now.is_empty() {
            break;
        }
        ready.extend(now);
    }
    let stuck: Vec<_> = waits.keys().filter(|g| !ready.contains(*g)).collect();
    ensure!(
        stuck.is_empty(),
        "groups {stuck:?} never become ready: they wait for each other ({waits:?})"
    );
    Ok(())
}

/// `arca server` on a group's rendered config, with its environment and arguments; only the
/// addresses it listens on are moved to free loopback ports and its data to `dir`.
fn launch(group: &Group, dir: &TempDir) -> anyhow::Result<Server> {
    let file = dir.join(&format!("{}.yaml", group.name));
    std::fs::write(&file, &group.file)?;
    let mut launch = Launch::arca(dir)
        .data_dir(dir.join(&group.name))
        .arg("--config")
        .arg(&file);
    for arg in &group.extra_args {
        launch = launch.arg(arg);
    }
    for service in &group.config.services {
        if let Some(Endpoint::Tcp(_)) = group.config.endpoint(service) {
            launch = launch.set(
                &format!("{service}.endpoint"),
                format!("tcp://{}", free_addr()),
            );
        }
    }
    for (var, value) in &group.env {
        launch = launch.env(var, value);
    }
    launch.spawn()
}

/// The chart's templates keep their own list of services and of who calls whom (Go templates
/// cannot read the Rust catalog): it must be the catalog's, in the catalog's order, so a new
/// service or dependency cannot reach the binary and miss the chart.
#[test]
fn the_charts_service_table_is_the_catalog() -> anyhow::Result<()> {
    let path = chart().join("templates/_helpers.tpl");
    let helpers =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let quoted = |text: &str| -> Vec<String> {
        text.split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let all = helpers
        .lines()
        .find_map(|l| l.split_once("$all := list ").map(|(_, rest)| quoted(rest)))
        .context("_helpers.tpl has no `$all := list` line")?;
    let catalog: Vec<&str> = arca_host::CATALOG.iter().map(|e| e.name).collect();
    assert_eq!(all, catalog, "the chart's $all list");

    // `$deps := dict` then one line per service: `"name" (list "dep" …)`, ending in `-}}`.
    let start = helpers
        .find("$deps := dict")
        .context("_helpers.tpl has no `$deps := dict`")?;
    let table = &helpers[start..];
    let table = &table[..table.find("-}}").context("`$deps` does not end")?];
    let mut chart_deps = BTreeMap::new();
    for line in table.lines().skip(1) {
        let names = quoted(line);
        let (name, deps) = names.split_first().context("an empty `$deps` line")?;
        chart_deps.insert(name.clone(), deps.to_vec());
    }
    let catalog_deps: BTreeMap<String, Vec<String>> = arca_host::CATALOG
        .iter()
        .map(|e| {
            let deps = e.dependencies.iter().map(|d| (*d).to_owned()).collect();
            (e.name.to_owned(), deps)
        })
        .collect();
    assert_eq!(chart_deps, catalog_deps, "the chart's $deps table");

    // `$optional := dict` the same way: arca_host::OPTIONAL_CALLS.
    let start = helpers
        .find("$optional := dict")
        .context("_helpers.tpl has no `$optional := dict`")?;
    let table = &helpers[start..];
    let table = &table[..table.find("-}}").context("`$optional` does not end")?];
    let mut chart_optional = BTreeSet::new();
    for line in table.lines().skip(1) {
        let names = quoted(line);
        let (name, callees) = names.split_first().context("an empty `$optional` line")?;
        for callee in callees {
            chart_optional.insert((name.clone(), callee.clone()));
        }
    }
    let optional: BTreeSet<(String, String)> = arca_host::OPTIONAL_CALLS
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(chart_optional, optional, "the chart's $optional table");
    Ok(())
}

#[test]
fn lint_passes_for_every_value_set() -> anyhow::Result<()> {
    let helm = Helm::new();
    let chart = chart().display().to_string();
    for values in [
        None,
        Some("all-in-one-values.yaml"),
        Some("scale-values.yaml"),
    ] {
        let mut args = vec!["lint".to_owned(), "--strict".to_owned(), chart.clone()];
        if let Some(file) = values {
            args.extend(["-f".to_owned(), value_file(file)]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = helm.run(&args)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("0 chart(s) failed"),
            "helm {args:?}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[tokio::test]
async fn defaults_give_six_groups_wired_by_dns_that_arca_runs() -> anyhow::Result<()> {
    let helm = Helm::new();
    let scratch = TempDir::new();
    let manifests = helm.render(&[])?;
    let groups = check(&manifests, &scratch)?;
    expect_groups(
        &[
            ("proxy", &["proxy"]),
            ("frontend", &["frontend", "gateway", "sharing"]),
            ("storage-system", &["storage-system"]),
            ("storage-users", &["storage-users"]),
            ("thumbnails", &["thumbnails"]),
            ("search", &["search"]),
        ],
        &groups,
    );
    for group in groups.values() {
        let kind = group.config.registry.kind;
        let calls_out = group
            .config
            .services
            .iter()
            .any(|s| dependencies(s).iter().any(|d| !group.hosts(d)));
        assert_eq!(
            kind,
            if calls_out {
                RegistryKind::Dns
            } else {
                RegistryKind::Static
            },
            "group {}",
            group.name
        );
    }
    // SQLite and local blobs by default: the storage groups keep a volume and one pod.
    assert_eq!(
        manifests.names("PersistentVolumeClaim"),
        BTreeSet::from([
            format!("{RELEASE}-arca-storage-system-data"),
            format!("{RELEASE}-arca-storage-users-data"),
        ])
    );
    assert_eq!(manifests.names("HorizontalPodAutoscaler"), BTreeSet::new());
    assert_eq!(
        manifests.names("PodDisruptionBudget"),
        BTreeSet::from([
            format!("{RELEASE}-arca-frontend"),
            format!("{RELEASE}-arca-proxy")
        ])
    );
    // One generated identity secret, the same for every pod.
    let secrets: BTreeSet<String> = groups
        .values()
        .filter_map(|g| g.config.identity.secret.clone())
        .collect();
    assert_eq!(secrets.len(), 1, "identity.secret differs between groups");
    assert!(secrets.iter().all(|s| s.len() >= 32));

    // The real binary takes each file as is. The storage groups call nothing and become
    // ready; the others are up but wait for names only the cluster's DNS knows.
    let dir = TempDir::new();
    let mut running = Vec::new();
    for group in groups.values() {
        running.push((group, launch(group, &dir)?));
    }
    for (group, server) in &mut running {
        let remote: Vec<&str> = group
            .config
            .services
            .iter()
            .flat_map(|s| dependencies(s).iter().copied())
            .filter(|d| !group.hosts(d))
            .collect();
        if remote.is_empty() {
            server.wait_ready(WITHIN).await?;
            continue;
        }
        let debug = server.debug.clone();
        eventually(
            WITHIN,
            &format!("group {}: /healthz 200", group.name),
            || {
                let debug = debug.clone();
                async move { Ok((get(&debug, "/healthz", &[]).await?.status == 200).then_some(())) }
            },
        )
        .await?;
        let body = server
            .wait_readyz(
                WITHIN,
                "not ready, naming a remote dependency",
                |status, body| status == 503 && remote.iter().any(|d| body.to_string().contains(d)),
            )
            .await?;
        assert!(
            !server.proc.has_exited(),
            "group {} exited: {body}",
            group.name
        );
    }
    Ok(())
}

#[tokio::test]
async fn all_in_one_runs_serves_logs_in_and_stops_within_its_grace() -> anyhow::Result<()> {
    let helm = Helm::new();
    let scratch = TempDir::new();
    let manifests = helm.render(&["-f", &value_file("all-in-one-values.yaml")])?;
    let groups = check(&manifests, &scratch)?;
    expect_groups(
        &[(
            "all",
            &[
                "proxy",
                "frontend",
                "gateway",
                "thumbnails",
                "search",
                "storage-users",
                "storage-system",
                "sharing",
            ],
        )],
        &groups,
    );
    let group = &groups["all"];
    assert_eq!(manifests.names("Deployment").len(), 1);
    for service in &group.config.services {
        assert_eq!(
            group.config.endpoint(service).map(ToString::to_string),
            Some(format!("mem://{service}")),
            "all in one pod: everything in memory"
        );
    }

    let dir = TempDir::new();
    let mut server = launch(group, &dir)?;
    server.wait_ready(WITHIN).await?;
    let status = server.get("/status.php").await?;
    assert_eq!(status.status, 200, "{}", status.text());
    // The admin password is the one in the Secret the chart generated.
    let password = group
        .config
        .identity
        .admin_password
        .clone()
        .context("no admin password given to the pod")?;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{password}"))
    );
    let me = get(
        &server.public,
        "/graph/v1.0/me",
        &[("authorization", &basic)],
    )
    .await?;
    assert_eq!(me.status, 200, "{}", me.text());
    let wrong = get(
        &server.public,
        "/graph/v1.0/me",
        &[("authorization", "Basic YWRtaW46bm90LWl0")],
    )
    .await?;
    assert_eq!(wrong.status, 401, "{}", wrong.text());

    // SIGTERM: it drains for the chart's drain delay, then exits 0 well inside the grace
    // period Kubernetes would give it.
    let grace = int(
        &group.pod_spec()["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    )?;
    let drain = group.config.shutdown.drain_delay;
    assert!(
        drain > Duration::ZERO,
        "the chart's default drain delay is 0"
    );
    let start = Instant::now();
    server.proc.sigterm();
    let exit = server
        .proc
        .wait_exit(Duration::from_secs(grace.try_into()?))
        .await?;
    let took = start.elapsed();
    assert_eq!(exit.code(), Some(0), "{}", server.proc.stderr_tail(20));
    assert!(
        took >= drain,
        "stopped after {took:?}, before the drain delay {drain:?}"
    );
    Ok(())
}

#[tokio::test]
async fn scale_values_use_nats_postgres_s3_and_autoscale() -> anyhow::Result<()> {
    let helm = Helm::new();
    let scratch = TempDir::new();
    let manifests = helm.render(&["-f", &value_file("scale-values.yaml")])?;
    let groups = check(&manifests, &scratch)?;
    expect_groups(
        &[
            ("proxy", &["proxy"]),
            ("frontend", &["frontend", "gateway", "sharing"]),
            ("storage-system", &["storage-system"]),
            ("storage-users", &["storage-users"]),
            ("thumbnails", &["thumbnails"]),
            ("search", &["search"]),
        ],
        &groups,
    );
    for group in groups.values() {
        assert_eq!(
            group.config.registry.kind,
            RegistryKind::Nats,
            "group {}",
            group.name
        );
        assert!(
            !group.keeps_local_state(),
            "group {} keeps local state",
            group.name
        );
    }
    // storage-system keeps no file contents: PostgreSQL is all it needs to scale out.
    let system = &groups["storage-system"].config.storage_system;
    assert_eq!(system.database.as_deref(), Some(DATABASE_URL));
    assert_eq!(system.blobs, None);
    let users = &groups["storage-users"].config.storage_users;
    assert_eq!(users.database.as_deref(), Some(DATABASE_URL));
    let Some(BlobsConfig::S3(s3)) = &users.blobs else {
        panic!("storage-users: blobs not in S3");
    };
    assert_eq!(s3.access_key_id.as_deref(), Some(SECRET_VALUE));
    assert_eq!(s3.secret_access_key.as_deref(), Some(SECRET_VALUE));
    // Secrets come from the existing Secrets named in the values; the chart makes none.
    assert_eq!(manifests.names("Secret"), BTreeSet::new());
    assert_eq!(manifests.names("PersistentVolumeClaim"), BTreeSet::new());
    for group in ["proxy", "frontend", "storage-users"] {
        let hpa = manifests.get(
            "HorizontalPodAutoscaler",
            &format!("{RELEASE}-arca-{group}"),
        )?;
        assert_eq!(hpa["spec"]["minReplicas"].as_i64(), Some(3), "{group}");
    }
    assert_eq!(
        manifests.names("PodDisruptionBudget").len(),
        4,
        "every group has several pods"
    );
    // The grace period follows the values: 2s preStop + 15s drain + 1m timeout, plus margin.
    for group in groups.values() {
        let grace = int(&group.pod_spec()["terminationGracePeriodSeconds"], "grace")?;
        assert!(grace > 77, "group {}: {grace}", group.name);
    }
    // HTTPS at the proxy: the Secret mounted where the config says the files are, and the
    // edge settings given under `config` reach the proxy's config as arca reads them.
    let proxy = &groups["proxy"];
    let tls = proxy
        .config
        .proxy
        .tls
        .as_ref()
        .context("proxy.tls not set")?;
    let tls_dir = tls
        .cert
        .parent()
        .context("cert path")?
        .display()
        .to_string();
    assert_eq!(
        Some(tls_dir.as_str()),
        tls.key.parent().and_then(Path::to_str)
    );
    let mount = list(&proxy.container()["volumeMounts"], "volumeMounts")?
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(tls_dir.as_str()))
        .with_context(|| format!("nothing mounted at {tls_dir}"))?;
    let volume = list(&proxy.pod_spec()["volumes"], "volumes")?
        .iter()
        .find(|v| v["name"] == mount["name"])
        .context("the TLS volume")?;
    assert_eq!(
        volume["secret"]["secretName"].as_str(),
        Some("arca-proxy-tls")
    );
    let oidc = proxy
        .config
        .proxy
        .oidc
        .as_ref()
        .context("proxy.oidc not set")?;
    assert_eq!(oidc.issuer, "https://idp.example.com/realms/arca");
    assert!(
        groups["frontend"].config.proxy.tls.is_none(),
        "TLS files outside the proxy's pod"
    );
    let ingress = manifests.get("Ingress", &format!("{RELEASE}-arca"))?;
    assert_eq!(
        ingress["spec"]["rules"][0]["host"].as_str(),
        Some("files.example.com")
    );

    // The binary takes the frontend group's file and arguments with the NATS registry: it is
    // up (the cluster's NATS is not reachable from here) and not ready until its storage
    // dependencies show up in the registry.
    let dir = TempDir::new();
    let frontend = &groups["frontend"];
    let mut server = launch(frontend, &dir)?;
    let debug = server.debug.clone();
    eventually(WITHIN, "frontend group: /healthz 200", || {
        let debug = debug.clone();
        async move { Ok((get(&debug, "/healthz", &[]).await?.status == 200).then_some(())) }
    })
    .await?;
    server
        .wait_readyz(WITHIN, "not ready, naming storage", |status, body| {
            status == 503 && body.to_string().contains("storage-")
        })
        .await?;
    Ok(())
}

#[test]
fn values_that_cannot_work_are_refused_naming_the_value() -> anyhow::Result<()> {
    let helm = Helm::new();
    let cases: [(&[&str], &str); 10] = [
        (
            &["--set", "groups.storage-users.replicas=2"],
            "groups.storage-users.replicas: 2 is more than 1, but storage-users keeps SQLite metadata or local blobs",
        ),
        (
            &[
                "-f",
                &value_file("all-in-one-values.yaml"),
                "--set",
                "groups.all.replicas=3",
            ],
            "groups.all.replicas: 3 is more than 1, but storage-users and storage-system keep",
        ),
        (
            &["--set", "groups.storage-system.autoscaling.enabled=true"],
            "groups.storage-system.autoscaling.enabled: an autoscaler would start more than 1 pod",
        ),
        (
            &["--set", "groups.frontend.services={frontend,gateway}"],
            "groups: no enabled group hosts sharing",
        ),
        (
            &[
                "--set",
                "groups.frontend.services={frontend,gateway,sharing,proxy}",
            ],
            "proxy is already hosted by group",
        ),
        (
            // A bare number: arca would not know seconds from milliseconds.
            &["--set-string", "shutdown.timeout=30"],
            "shutdown.timeout: Does not match pattern",
        ),
        (
            // A typo must not silently keep the default.
            &["--set", "groups.storage-users.replica=2"],
            "groups.storage-users: Additional property replica is not allowed",
        ),
        (
            &["--set", "shutdown.drainDelay=1m30x"],
            "shutdown.drainDelay: Does not match pattern",
        ),
        (
            &["--set", "registry.kind=nats"],
            "registry.nats.url: required with registry.kind nats",
        ),
        (
            &["--set", "config.debug.addr=0.0.0.0:1"],
            "config.debug: set by the chart",
        ),
    ];
    for (args, message) in cases {
        let out = helm.template(args)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(message),
            "helm template {args:?} should fail with {message:?}; {}:\n{stderr}",
            out.status
        );
    }
    // The same values, fixed, render.
    helm.render(&["--set", "groups.storage-users.replicas=1"])?;
    Ok(())
}

#[test]
fn other_groupings_and_the_static_registry_are_wired_as_consistently() -> anyhow::Result<()> {
    let helm = Helm::new();
    let scratch = TempDir::new();
    // The same six groups, found through registry.static instead of DNS.
    let manifests = helm.render(&["--set", "registry.kind=static"])?;
    let groups = check(&manifests, &scratch)?;
    assert_eq!(
        groups["frontend"].config.registry.kind,
        RegistryKind::Static
    );
    // Four groups of a custom layout: the web tier in one pod, each storage and previews in
    // their own.
    let manifests = helm.render(&[
        "--set",
        "groups.proxy.enabled=false",
        "--set",
        "groups.frontend.enabled=false",
        "--set",
        "groups.web.services={proxy,frontend,gateway,sharing}",
        "--set",
        "groups.web.replicas=3",
    ])?;
    let groups = check(&manifests, &scratch)?;
    expect_groups(
        &[
            ("web", &["proxy", "frontend", "gateway", "sharing"]),
            ("storage-system", &["storage-system"]),
            ("storage-users", &["storage-users"]),
            ("thumbnails", &["thumbnails"]),
            ("search", &["search"]),
        ],
        &groups,
    );
    Ok(())
}

/// The first three octets of the loopback addresses the pods of
/// [`the_default_groups_serve_by_their_service_names_and_roll_without_a_failure`] get: each
/// process listens on its own address at the chart's ports, as pods do on theirs.
const POD_NET: &str = "127.0.86";

/// Processes started from the rendered groups as a cluster would run their pods: each on an
/// address of its own, all finding each other by the headless Services' names, which a hosts
/// file of the test's answers (see [`Launch::arca_with_hosts`]) with the live pods' addresses,
/// as the cluster's DNS answers with the ready endpoints.
struct Cluster<'a> {
    groups: &'a BTreeMap<String, Group>,
    dir: &'a TempDir,
    hosts: PathBuf,
    pods: Vec<Pod>,
}

struct Pod {
    group: String,
    ip: String,
    server: Server,
    /// Listed in the Services' names (a terminating pod is not).
    listed: bool,
}

impl<'a> Cluster<'a> {
    fn new(groups: &'a BTreeMap<String, Group>, dir: &'a TempDir) -> Self {
        Self {
            groups,
            dir,
            hosts: dir.join("hosts"),
            pods: Vec::new(),
        }
    }

    /// service → the host its callers are given (from any group's DNS names).
    fn service_hosts(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for group in self.groups.values() {
            for (service, addr) in &group.config.registry.dns.names {
                if let Some((host, _)) = addr.rsplit_once(':') {
                    out.insert(service.clone(), host.to_owned());
                }
            }
        }
        out
    }

    /// Rewrites the hosts file in place (the same file every namespace has bound).
    fn publish(&self) -> anyhow::Result<()> {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (service, host) in self.service_hosts() {
            for pod in self.pods.iter().filter(|p| p.listed) {
                if self.groups[&pod.group].hosts(&service) {
                    text.push_str(&format!("{} {host}\n", pod.ip));
                }
            }
        }
        std::fs::write(&self.hosts, text)?;
        Ok(())
    }

    /// Starts one more pod of `group` and lists it; returns its index.
    fn start(&mut self, group: &str) -> anyhow::Result<usize> {
        if self.pods.is_empty() {
            self.publish()?;
        }
        let g = &self.groups[group];
        let ip = format!("{POD_NET}.{}", 10 + self.pods.len());
        let n = self.pods.len();
        let file = self.dir.join(&format!("{group}.yaml"));
        std::fs::write(&file, &g.file)?;
        let mut launch = Launch::arca_with_hosts(self.dir, &self.hosts)
            .data_dir(self.dir.join(&format!("{group}-{n}")))
            .arg("--config")
            .arg(&file);
        for arg in &g.extra_args {
            launch = launch.arg(arg.replace(POD_IP, &ip));
        }
        // Each service listens where its pod would: the pod's address, the chart's port.
        for service in &g.config.services {
            if let Some(endpoint @ Endpoint::Tcp(_)) = g.config.endpoint(service) {
                let text = endpoint.to_string();
                let (_, port) = text
                    .rsplit_once(':')
                    .with_context(|| format!("{service}: endpoint {text}"))?;
                launch = launch.set(&format!("{service}.endpoint"), format!("tcp://{ip}:{port}"));
            }
        }
        for (var, value) in &g.env {
            launch = launch.env(var, value.replace(POD_IP, &ip));
        }
        self.pods.push(Pod {
            group: group.to_owned(),
            ip,
            server: launch.spawn()?,
            listed: true,
        });
        self.publish()?;
        Ok(n)
    }
}

/// The admin, through the proxy of a [`Cluster`].
#[derive(Clone)]
struct Admin {
    proxy: String,
    auth: String,
}

impl Admin {
    async fn dav(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<bytes::Bytes>,
    ) -> anyhow::Result<arca_tests::HttpResponse> {
        arca_tests::send_as(&self.proxy, &self.auth, method, path, headers, body).await
    }
}

/// The default chart's six groups run as pods would (issue 36): every process on an address
/// of its own at the chart's ports, finding the others by the Services' names only. Requests
/// through the proxy reach every group (files on storage-users, logins on storage-system, a
/// search, a preview), then the frontend group (two pods) is rolled under a load of sync-like
/// clients — a third pod started and listed, the first unlisted and sent SIGTERM as Kubernetes
/// does at once — with 0 failed requests and every body read back as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_groups_serve_by_their_service_names_and_roll_without_a_failure()
-> anyhow::Result<()> {
    const READY: Duration = Duration::from_secs(60);
    let helm = Helm::new();
    let scratch = TempDir::new();
    let manifests = helm.render(&[])?;
    let groups = check(&manifests, &scratch)?;
    let dir = TempDir::new();
    let mut cluster = Cluster::new(&groups, &dir);
    for group in groups.keys() {
        cluster.start(group)?;
    }
    let second_frontend = cluster.start("frontend")?;
    for pod in &mut cluster.pods {
        pod.server.wait_ready(READY).await.with_context(|| {
            format!(
                "group {} at {}: {}",
                pod.group,
                pod.ip,
                pod.server.proc.stderr_tail(20)
            )
        })?;
    }
    let proxy = cluster
        .pods
        .iter()
        .find(|p| p.group == "proxy")
        .context("no proxy pod")?
        .server
        .public
        .clone();
    let password = groups["storage-system"]
        .config
        .identity
        .admin_password
        .clone()
        .context("no admin password given to storage-system")?;
    let admin = Admin {
        proxy,
        auth: arca_tests::basic("admin", &password),
    };
    let root = "/remote.php/dav/files/admin";

    // Every group serves: storage-system (the login), storage-users (the files), search and
    // thumbnails (each through its own Service name from the frontend pods).
    let r = admin.dav("MKCOL", &format!("{root}/roll"), &[], "").await?;
    ensure!(
        r.status == 201,
        "MKCOL through the groups: {} {}",
        r.status,
        r.text()
    );
    let note = b"a needle for the search group".to_vec();
    let r = admin
        .dav(
            "PUT",
            &format!("{root}/roll/helm-needle.txt"),
            &[],
            note.clone(),
        )
        .await?;
    ensure!(r.status == 201, "PUT: {} {}", r.status, r.text());
    let r = admin
        .dav("GET", &format!("{root}/roll/helm-needle.txt"), &[], "")
        .await?;
    ensure!(r.status == 200 && r.body == note, "GET: {}", r.status);
    let report = r#"<?xml version="1.0" encoding="UTF-8"?>
<oc:search-files xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
  <d:prop><oc:name/></d:prop>
  <oc:search><oc:pattern>helm-needle</oc:pattern><oc:limit>10</oc:limit></oc:search>
</oc:search-files>"#;
    eventually(READY, "the search group finds the file", || {
        let admin = admin.clone();
        async move {
            let r = admin
                .dav(
                    "REPORT",
                    "/remote.php/dav/spaces/",
                    &[("content-type", "application/xml")],
                    report,
                )
                .await?;
            Ok((r.status == 207 && r.text().contains("helm-needle.txt")).then_some(()))
        }
    })
    .await?;
    let mut png = Vec::new();
    image::DynamicImage::ImageRgb8(image::RgbImage::from_pixel(
        64,
        48,
        image::Rgb([200, 30, 30]),
    ))
    .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
    let r = admin
        .dav("PUT", &format!("{root}/roll/red.png"), &[], png)
        .await?;
    ensure!(r.status == 201, "PUT png: {}", r.status);
    let r = admin
        .dav(
            "GET",
            &format!("{root}/roll/red.png?preview=1&x=32&y=32"),
            &[],
            "",
        )
        .await?;
    ensure!(
        r.status == 200
            && r.headers
                .get("content-type")
                .is_some_and(|v| v.as_bytes().starts_with(b"image/")),
        "a preview from the thumbnails group: {} {}",
        r.status,
        r.text()
    );

    // The roll, under load.
    let stop = tokio_util::sync::CancellationToken::new();
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (admin, stop) = (admin.clone(), stop.clone());
            tokio::spawn(async move {
                let mut done = 0usize;
                let mut k = 0u32;
                while !stop.is_cancelled() {
                    let size = [1_000, 70_000, 300_000, 4_096][k as usize % 4];
                    // Eight names per client, written over and over.
                    let path = format!("{root}/roll/c{c}-{}.bin", k % 8);
                    let body = arca_tests::pattern(size, c * 10_000 + k);
                    let r = admin.dav("PUT", &path, &[], body.clone()).await?;
                    ensure!(
                        matches!(r.status, 201 | 204),
                        "PUT {path}: {} {}",
                        r.status,
                        r.text()
                    );
                    let r = admin.dav("GET", &path, &[], "").await?;
                    ensure!(
                        r.status == 200 && r.body == body,
                        "GET {path}: {} ({} bytes)",
                        r.status,
                        r.body.len()
                    );
                    let r = admin
                        .dav("PROPFIND", &format!("{root}/roll/"), &[("depth", "1")], "")
                        .await?;
                    ensure!(r.status == 207, "PROPFIND: {} {}", r.status, r.text());
                    done += 3;
                    k += 1;
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let third = cluster.start("frontend")?;
    cluster.pods[third].server.wait_ready(READY).await?;
    // Kubernetes takes a terminating pod out of its Services and sends SIGTERM at once; the
    // pod drains (`shutdown.drain_delay`) while callers learn the new names.
    let first = cluster
        .pods
        .iter()
        .position(|p| p.group == "frontend")
        .context("a frontend pod")?;
    ensure!(first != second_frontend && first != third);
    cluster.pods[first].listed = false;
    cluster.publish()?;
    cluster.pods[first].server.proc.sigterm();
    let exit = cluster.pods[first]
        .server
        .proc
        .wait_exit(Duration::from_secs(45))
        .await?;
    ensure!(exit.code() == Some(0), "the rolled pod: {exit:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    let mut requests = 0;
    for c in clients {
        requests += tokio::time::timeout(Duration::from_secs(60), c).await???;
    }
    eprintln!("the frontend group rolled under load: {requests} requests, 0 failed");
    ensure!(requests >= 60, "only {requests} requests during the roll");
    Ok(())
}
