//! `prezero serve`'s configuration file (see packaging/prezero.toml): its
//! TOML, and its values, with the flags put over them, made a
//! [`ServerConfig`]. A pool's target and cap are sizes or shares of its
//! node's memory (`"1/8"`, `"12.5%"`: [`Amount`]). The one owner of the
//! format: `prezero serve` and the fuzz target `config` read it here.

use std::fmt;
use std::path::PathBuf;

use prezero::{parse_size, PageKind, ScrubPriority};
use serde::Deserialize;

use super::{Amount, PoolConfig, PoolNode, Prepare, Reuse, ServerConfig};
use crate::charged::Verify;

/// What is wrong with a configuration, in a sentence that names the value
/// and the setting it was given for ("pool target: ...").
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl From<prezero::Error> for ConfigError {
    fn from(e: prezero::Error) -> Self {
        ConfigError(e.to_string())
    }
}

impl From<crate::Error> for ConfigError {
    fn from(e: crate::Error) -> Self {
        ConfigError(e.to_string())
    }
}

impl From<toml::de::Error> for ConfigError {
    fn from(e: toml::de::Error) -> Self {
        ConfigError(e.to_string())
    }
}

type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// A refusal, said as `format!` says it.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err(ConfigError(format!($($arg)*)))
    };
}

/// The setting a failure was met in, put before it: "pool target: why".
trait Within<T> {
    fn within(self, setting: &str) -> Result<T>;
}

impl<T, E: fmt::Display> Within<T> for std::result::Result<T, E> {
    fn within(self, setting: &str) -> Result<T> {
        self.map_err(|e| ConfigError(format!("{setting}: {e}")))
    }
}

/// The configuration file. Sizes are strings like "256M" or "8G"; a pool's
/// target and cap may also be a share of its node's memory ("1/8",
/// "12.5%"). The flags of `prezero serve` are put over its fields before
/// they are read.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `socket`: where the daemon listens.
    pub socket: Option<PathBuf>,
    /// `allow_uids`: uids served besides the daemon's own.
    #[serde(default)]
    pub allow_uids: Vec<u32>,
    /// `allow_gids`: groups whose members are served.
    #[serde(default)]
    pub allow_gids: Vec<u32>,
    /// `uid_cap`: the most one uid holds (a size).
    pub uid_cap: Option<String>,
    /// `verify`: `full` or `sample:N`.
    pub verify: Option<String>,
    /// `scrub_priority`: `idle`, `nice19` or `normal`.
    pub scrub_priority: Option<String>,
    /// `reuse`: `same-uid` or `fresh`.
    pub reuse: Option<String>,
    /// `max_conns_per_uid`: connections one uid may hold open.
    pub max_conns_per_uid: Option<usize>,
    /// `ledger`: the file a restarted daemon finds its loans in.
    pub ledger: Option<PathBuf>,
    /// `metrics_textfile`: a Prometheus text file, rewritten.
    pub metrics_textfile: Option<PathBuf>,
    /// `metrics_interval`: seconds between rewrites of that file.
    pub metrics_interval: Option<f64>,
    #[serde(default, rename = "pool")]
    pools: Vec<FilePool>,
    /// `[[prepare]]` tables, then `--prepare` flags.
    #[serde(default)]
    pub prepare: Vec<ConfigPrepare>,
}

/// `[[prepare]] cgroup = "/machine.slice/vm1.scope", size = "4G", page = "2MB"`.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct ConfigPrepare {
    cgroup: PathBuf,
    size: String,
    page: Option<String>,
}

impl ConfigPrepare {
    /// `--prepare CGROUP=SIZE[:PAGE]`: the cgroup's path, the bytes, the page
    /// (2MB unless said).
    pub fn from_flag(s: &str) -> Result<ConfigPrepare> {
        let (cgroup, rest) = s
            .rsplit_once('=')
            .ok_or_else(|| ConfigError(format!("--prepare {s}: expected CGROUP=SIZE[:PAGE]")))?;
        let (size, page) = match rest.split_once(':') {
            Some((size, page)) => (size, Some(page.to_owned())),
            None => (rest, None),
        };
        Ok(ConfigPrepare {
            cgroup: cgroup.into(),
            size: size.to_owned(),
            page,
        })
    }

    fn config(&self) -> Result<Prepare> {
        let page: PageKind = self.page.as_deref().unwrap_or("2MB").parse()?;
        if !page.is_hugetlb() {
            refuse!(
                "prepare {}: the pages are 2MB or 1GB",
                self.cgroup.display()
            );
        }
        if !self.cgroup.is_absolute() {
            refuse!(
                "prepare {}: a cgroup path starts with /",
                self.cgroup.display()
            );
        }
        let bytes = parse_size(&self.size).within(&format!("prepare {}", self.cgroup.display()))?;
        Ok(Prepare {
            cgroup: self.cgroup.clone(),
            bytes,
            page,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePool {
    page: String,
    segment: Option<String>,
    target: String,
    cap: Option<String>,
    /// A node id, or "all".
    node: Option<FileNode>,
}

/// `node = 1` or `node = "all"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum FileNode {
    Id(u32),
    Word(String),
}

impl FilePool {
    /// The pool a `[[pool]]` table describes, read as its flag would be.
    fn config(&self) -> Result<PoolConfig> {
        let node = self.node.as_ref().map(FileNode::text);
        pool(
            &self.page,
            &self.target,
            self.cap.as_deref(),
            self.segment.as_deref(),
            node.as_deref(),
        )
    }
}

impl FileNode {
    fn text(&self) -> String {
        match self {
            FileNode::Id(n) => n.to_string(),
            FileNode::Word(w) => w.clone(),
        }
    }
}

impl ConfigFile {
    /// The file's text read; its values are read by [`ConfigFile::config`].
    pub fn parse(text: &str) -> Result<ConfigFile> {
        Ok(toml::from_str(text)?)
    }

    /// The configuration: the defaults, with what the file (and the flags put
    /// over it) says. `flag_pools`, if any, replace the file's pools.
    pub fn config(self, flag_pools: Vec<PoolConfig>) -> Result<ServerConfig> {
        let mut cfg = ServerConfig::default();
        if let Some(s) = self.socket {
            cfg.socket = s;
        }
        cfg.pools = if !flag_pools.is_empty() {
            flag_pools
        } else if !self.pools.is_empty() {
            self.pools
                .iter()
                .map(FilePool::config)
                .collect::<Result<_, _>>()?
        } else {
            vec![parse_pool_flag("2MB:target=1G,cap=4G,segment=256M")?]
        };
        cfg.allow_uids = self.allow_uids;
        cfg.allow_gids = self.allow_gids;
        if let Some(c) = &self.uid_cap {
            cfg.uid_cap = Some(parse_size(c).within("uid cap")?);
        }
        if let Some(v) = &self.verify {
            cfg.verify = verify(v)?;
        }
        if let Some(p) = &self.scrub_priority {
            cfg.scrub_priority = priority(p)?;
        }
        if let Some(r) = &self.reuse {
            cfg.reuse = match r.as_str() {
                "same-uid" => Reuse::SameUid,
                "fresh" => Reuse::Fresh,
                _ => refuse!("reuse '{r}': expected same-uid or fresh"),
            };
        }
        if let Some(n) = self.max_conns_per_uid {
            cfg.max_conns_per_uid = n;
        }
        cfg.ledger = self.ledger;
        cfg.metrics_textfile = self.metrics_textfile;
        cfg.prepare = self
            .prepare
            .iter()
            .map(ConfigPrepare::config)
            .collect::<Result<_, _>>()?;
        if let Some(secs) = self.metrics_interval {
            let most = super::MAX_METRICS_INTERVAL.as_secs_f64();
            if !(secs.is_finite() && (0.01..=most).contains(&secs)) {
                refuse!("metrics interval {secs}: expected seconds, from 0.01 to {most}");
            }
            cfg.metrics_interval = std::time::Duration::from_secs_f64(secs);
        }
        Ok(cfg)
    }
}

/// `all` or a node id.
fn pool_node(s: &str) -> Result<PoolNode> {
    if s == "all" {
        return Ok(PoolNode::All);
    }
    s.parse()
        .map(PoolNode::Node)
        .map_err(|_| ConfigError(format!("pool node '{s}': expected a NUMA node id or all")))
}

fn page_kind(s: &str) -> Result<PageKind> {
    let k: PageKind = s.parse()?;
    if !k.is_hugetlb() {
        refuse!("pool page '{s}': the service serves 2MB or 1GB pages");
    }
    Ok(k)
}

fn pool(
    page: &str,
    target: &str,
    cap: Option<&str>,
    segment: Option<&str>,
    node: Option<&str>,
) -> Result<PoolConfig> {
    let page = page_kind(page)?;
    let target = Amount::parse(target).within("pool target")?;
    let default_segment = page.page_size().max(256 << 20);
    let segment_size = segment
        .map_or(Ok(default_segment), parse_size)
        .within("pool segment")?;
    // Without a cap: the target (a share of the node's memory stays one,
    // which placement makes a segment at least), at least a segment.
    let default_cap = match target {
        Amount::Bytes(b) => Amount::Bytes(b.max(segment_size)),
        share => share,
    };
    let cap = cap
        .map_or(Ok(default_cap), Amount::parse)
        .within("pool cap")?;
    let node = node.map_or(Ok(PoolNode::All), pool_node)?;
    Ok(PoolConfig {
        page,
        segment_size,
        target,
        cap,
        node,
    })
}

/// `2MB:target=8G,cap=16G,segment=256M,node=1`
pub fn parse_pool_flag(s: &str) -> Result<PoolConfig> {
    let (page, rest) = s.split_once(':').unwrap_or((s, ""));
    let (mut target, mut cap, mut segment, mut node) = (None, None, None, None);
    for kv in rest.split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| ConfigError(format!("--pool {s}: '{kv}' is not key=value")))?;
        match k {
            "target" => target = Some(v),
            "cap" => cap = Some(v),
            "segment" => segment = Some(v),
            "node" => node = Some(v),
            _ => {
                refuse!("--pool {s}: unknown key '{k}' (target, cap, segment, node)")
            }
        }
    }
    pool(page, target.unwrap_or("1G"), cap, segment, node)
}

fn verify(s: &str) -> Result<Verify> {
    match s.split_once(':') {
        None if s == "full" => Ok(Verify::Full),
        Some(("sample", n)) => Ok(Verify::Sampled {
            one_in: n.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                ConfigError(format!("verify '{s}': N must be a positive integer"))
            })?,
        }),
        _ => refuse!("verify '{s}': expected full or sample:N"),
    }
}

fn priority(s: &str) -> Result<ScrubPriority> {
    match s {
        "idle" => Ok(ScrubPriority::Idle),
        "nice19" => Ok(ScrubPriority::Nice19),
        "normal" => Ok(ScrubPriority::Normal),
        _ => refuse!("scrub priority '{s}': expected idle, nice19 or normal"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_flags_parse() {
        let p = parse_pool_flag("2MB:target=8G,cap=16G,segment=256M").unwrap();
        assert_eq!(
            (p.page, p.target, p.cap, p.segment_size),
            (
                PageKind::Huge2M,
                Amount::Bytes(8 << 30),
                Amount::Bytes(16 << 30),
                256 << 20
            )
        );
        let p = parse_pool_flag("1GB:target=2G").unwrap();
        assert_eq!((p.segment_size, p.cap), (1 << 30, Amount::Bytes(2 << 30)));
        // Shares of the node's memory; the cap is the target's share unless given.
        let p = parse_pool_flag("2MB:target=1/8,cap=25%").unwrap();
        let share = |num, den| Amount::Share { num, den };
        assert_eq!((p.target, p.cap), (share(1, 8), share(1, 4)));
        assert_eq!(
            parse_pool_flag("2MB:target=12.5%").unwrap().cap,
            share(1, 8)
        );
        for bad in [
            "2MB:target=9/8",
            "2MB:target=0/8",
            "2MB:cap=101%",
            "2MB:target=1/0",
        ] {
            let e = format!("{:#}", parse_pool_flag(bad).unwrap_err());
            assert!(e.contains("not a share of the node's memory"), "{bad}: {e}");
        }
        assert!(parse_pool_flag("4KB:target=1G").is_err());
        assert!(parse_pool_flag("2MB:size=1G").is_err());
        assert_eq!(
            parse_pool_flag("2MB:target=1G").unwrap().node,
            PoolNode::All
        );
        assert_eq!(parse_pool_flag("2MB:node=all").unwrap().node, PoolNode::All);
        assert_eq!(
            parse_pool_flag("2MB:node=3").unwrap().node,
            PoolNode::Node(3)
        );
        assert!(parse_pool_flag("2MB:node=-1").is_err());
        assert!(parse_pool_flag("2MB:node=one").is_err());
        assert!(verify("sample:0").is_err());
        assert_eq!(verify("sample:8").unwrap(), Verify::Sampled { one_in: 8 });
    }

    #[test]
    fn a_pools_node_in_the_file_is_an_id_or_all() {
        let nodes = |text: &str| -> Result<Vec<PoolNode>> {
            let f: ConfigFile = toml::from_str(text)?;
            f.pools
                .iter()
                .map(|p| {
                    let node = p.node.as_ref().map(FileNode::text);
                    pool(&p.page, &p.target, None, None, node.as_deref()).map(|p| p.node)
                })
                .collect()
        };
        let text = "[[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = 1\n\n\
                    [[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = \"all\"\n\n\
                    [[pool]]\npage = \"2MB\"\ntarget = \"1G\"\n";
        assert_eq!(
            nodes(text).unwrap(),
            vec![PoolNode::Node(1), PoolNode::All, PoolNode::All]
        );
        assert!(nodes("[[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = \"one\"\n").is_err());
        assert!(nodes("[[pool]]\npage = \"2MB\"\ntarget = \"1G\"\nnode = -1\n").is_err());
    }

    /// The package's configuration asks for a share of each node's memory,
    /// not for bytes a small machine does not have.
    #[test]
    fn the_packaged_config_parses_and_asks_for_shares() {
        let text = include_str!("../../../packaging/prezero.toml");
        let f: ConfigFile = toml::from_str(text).unwrap();
        assert!(!f.pools.is_empty());
        for p in &f.pools {
            let c = p.config().unwrap();
            assert!(c.target.is_share() && c.cap.is_share(), "{:?}", p.target);
        }
    }

    /// A share is placed as whole segments of each node's memory, within
    /// its cap; a share too small for a segment keeps one at most.
    #[test]
    fn shares_are_placed_per_node() {
        use prezero::numa::Topology;
        let text =
            "[[pool]]\npage = \"2MB\"\nsegment = \"256M\"\ntarget = \"1/8\"\ncap = \"1/4\"\n";
        let cfg = ConfigFile::parse(text).unwrap().config(Vec::new()).unwrap();
        let topology = Topology::read();
        let placed = cfg.placed_pools(&topology).unwrap();
        assert_eq!(placed.len(), topology.memory_nodes().len());
        for p in &placed {
            let mem = topology.node(p.node).unwrap().mem_total as usize;
            let seg = 256usize << 20;
            assert_eq!(p.target, (mem / 8 / seg * seg).min(p.cap), "{p:?}");
            assert_eq!(p.cap, (mem / 4 / seg * seg).max(seg), "{p:?}");
        }
        // A target of bytes beyond a share's cap is refused, with both said.
        let text = "[[pool]]\npage = \"2MB\"\ntarget = \"1T\"\ncap = \"1/1000000\"\n";
        let cfg = ConfigFile::parse(text).unwrap().config(Vec::new()).unwrap();
        let e = cfg.placed_pools(&topology).unwrap_err().to_string();
        assert!(
            e.contains("target <= cap") && e.contains("cap 268435456 bytes"),
            "{e}"
        );
    }
}
