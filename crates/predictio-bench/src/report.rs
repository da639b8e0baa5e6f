//! Benchmark result files: the JSON schema of `docs/results/WORKLOAD.json`
//! (see `BENCHMARKS.md`, "Result files"), small statistics helpers (median,
//! nearest-rank percentile, min/median/max summaries), and the two
//! human-readable renderings of a run: a Markdown table and a hand-written
//! SVG bar chart. Nothing here measures anything; workloads fill a
//! [`Report`] and call [`Report::write`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// min/median/max of a sample.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Smallest value.
    pub min: f64,
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Largest value.
    pub max: f64,
}

impl Summary {
    /// Summarises `xs`; an empty sample gives all zeros. NaN values are
    /// ordered with [`f64::total_cmp`] (they sort to the ends) rather than
    /// panicking.
    pub fn of(xs: &[f64]) -> Summary {
        let s = sorted(xs);
        match (s.first(), s.last()) {
            (Some(&min), Some(&max)) => Summary { min, median: median_sorted(&s), max },
            _ => Summary::default(),
        }
    }
}

/// A sorted copy of `xs` (total order, so NaN cannot panic the sort).
fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Median of `xs`: the middle value, or the mean of the two middle values
/// for an even count; 0.0 for an empty sample.
pub fn median(xs: &[f64]) -> f64 {
    median_sorted(&sorted(xs))
}

/// Nearest-rank percentile of `xs` (`p` in 0..=100, clamped; NaN counts as
/// 0): the value at rank `ceil(p/100 * n)` (at least 1) of a sorted copy.
/// 0.0 for an empty sample.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let s = sorted(xs);
    let n = s.len();
    if n == 0 {
        return 0.0;
    }
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
    // Float-to-int `as` saturates; the clamp keeps the rank within 1..=n.
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    s[rank.clamp(1, n) - 1]
}

fn yes() -> bool {
    true
}

/// One measured case of a workload: either an interleaved A/B comparison
/// (`baseline_s` non-empty) or a single metric (`extra` holds `value`,
/// `unit`, `seed`, and where `BENCHMARKS.md` sets a bar for it, `bar` and
/// `meets_bar`).
///
/// `Default` gives an empty case with `answers_identical: true`, matching
/// what deserialisation assumes when the field is absent.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Case {
    /// Case name, e.g. `scan-1000`.
    pub name: String,
    /// Baseline pass times in seconds, in run order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_s: Vec<f64>,
    /// Treatment pass times in seconds, in run order (pair i is
    /// `baseline_s[i]`, `treatment_s[i]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub treatment_s: Vec<f64>,
    /// per pair baseline/treatment (above 1 = faster)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratios: Vec<f64>,
    /// Median of `ratios`.
    #[serde(default)]
    pub ratio_median: f64,
    /// min/median/max of `baseline_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Summary>,
    /// min/median/max of `treatment_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub treatment: Option<Summary>,
    /// physical limit: bytes needed / best device bandwidth (seconds)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_s: Option<f64>,
    /// warm-cache time (seconds)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_s: Option<f64>,
    /// largest resident fraction of the workload's files seen right before any measured pass
    #[serde(default)]
    pub resident_before: f64,
    /// Whether every pass produced the same answer (row counts, checksums,
    /// tensor hashes) with and without prefetching.
    #[serde(default = "yes")]
    pub answers_identical: bool,
    /// Bytes the prefetcher issued during the treatment passes.
    #[serde(default)]
    pub issued_bytes: u64,
    /// Issued bytes that were never used.
    #[serde(default)]
    pub wasted_bytes: u64,
    /// workload-specific figures: peers ("preload_s": [...]), latency percentiles, or for metric cases
    /// {"value": 12.3, "unit": "ns/page", "bar": "<= 20", "seed": "tens of ns/page", "meets_bar": true}
    /// (`bar` and `meets_bar` only where the case has a bar)
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for Case {
    fn default() -> Case {
        Case {
            name: String::new(),
            baseline_s: Vec::new(),
            treatment_s: Vec::new(),
            ratios: Vec::new(),
            ratio_median: 0.0,
            baseline: None,
            treatment: None,
            limit_s: None,
            warm_s: None,
            resident_before: 0.0,
            answers_identical: true,
            issued_bytes: 0,
            wasted_bytes: 0,
            extra: Map::new(),
        }
    }
}

impl Case {
    /// Builds an A/B case: fills ratios (b/t per pair, index-aligned, pairs = min len), ratio_median, baseline/treatment summaries.
    ///
    /// A pair whose ratio is not finite (treatment time 0 or NaN) gets
    /// ratio 0.0, because JSON cannot carry infinities or NaN. Summaries are
    /// `None` for an empty side. Everything else is default
    /// (`answers_identical: true`); set the other fields afterwards.
    pub fn ab(name: impl Into<String>, baseline_s: Vec<f64>, treatment_s: Vec<f64>) -> Case {
        let ratios: Vec<f64> = baseline_s
            .iter()
            .zip(&treatment_s)
            .map(|(b, t)| {
                let r = b / t;
                if r.is_finite() { r } else { 0.0 }
            })
            .collect();
        let summary = |xs: &[f64]| (!xs.is_empty()).then(|| Summary::of(xs));
        Case {
            name: name.into(),
            ratio_median: median(&ratios),
            baseline: summary(&baseline_s),
            treatment: summary(&treatment_s),
            baseline_s,
            treatment_s,
            ratios,
            ..Case::default()
        }
    }

    /// Builds a metric case (no A/B): sets extra value/unit/seed, and
    /// `bar`/`meets_bar` when `bar` is `Some((text, met))`: only a case
    /// with a bar of `BENCHMARKS.md` has one, and a case without a bar
    /// carries neither key (not a `meets_bar` that would read as a bar met).
    ///
    /// A non-finite `value` is stored as JSON `null`.
    pub fn metric(name: impl Into<String>, value: f64, unit: &str, seed: &str, bar: Option<(&str, bool)>) -> Case {
        let mut extra = Map::new();
        extra.insert("value".into(), Value::from(value));
        extra.insert("unit".into(), Value::from(unit));
        if let Some((text, met)) = bar {
            extra.insert("bar".into(), Value::from(text));
            extra.insert("meets_bar".into(), Value::from(met));
        }
        extra.insert("seed".into(), Value::from(seed));
        Case { name: name.into(), extra, ..Case::default() }
    }

    /// Whether the case meets its bar: `None` when it has none.
    pub fn meets_bar(&self) -> Option<bool> {
        self.extra.get("meets_bar").and_then(Value::as_bool)
    }

    /// True for a metric case: no baseline passes and an `extra["value"]`.
    pub fn is_metric(&self) -> bool {
        self.baseline_s.is_empty() && self.extra.contains_key("value")
    }
}

/// The git revision the bench was built from: the commit, `-dirty` when
/// tracked files differed from it, `unknown` outside a git checkout, or
/// `PREDICTIO_GIT_REVISION` at build time (see `build.rs`).
pub const GIT_REVISION: &str = env!("PREDICTIO_BENCH_GIT_REVISION");

/// What produced a run besides its command line: the code and the
/// environment that filtered or changed its cases. Flattened into the
/// result file as `git_revision` and `env`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Provenance {
    /// [`GIT_REVISION`] of the binary that ran.
    #[serde(default)]
    pub git_revision: String,
    /// Every variable of [`crate::harness::BenchVar`] that was set, name →
    /// value; empty when none was.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl Provenance {
    /// This binary's revision and this process's bench variables.
    pub fn capture() -> Provenance {
        Provenance { git_revision: GIT_REVISION.to_owned(), env: crate::harness::BenchVar::captured() }
    }
}

/// One run of one workload: what ran, where, how the cache was made cold,
/// and every case. Serialised as `docs/results/WORKLOAD.json`.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Report {
    /// Workload name, e.g. `sqlite-scan`; also the output file stem.
    pub workload: String,
    /// The command line that produced this run.
    pub command: String,
    /// The revision built and the environment variables that filtered or
    /// changed cases ([`Provenance::capture`]).
    #[serde(flatten)]
    pub provenance: Provenance,
    /// UTC time the run finished, RFC 3339 (compute from SystemTime yourself; no chrono dependency)
    ///
    /// See [`now_rfc3339`].
    pub created: String,
    /// The machine and its device limits.
    pub machine: crate::machine::Machine,
    /// workload settings (file sizes, pairs, backend, depth...)
    pub settings: Value,
    /// how the cache was made cold: "drop_caches" or "fadvise(DONTNEED) of the workload's files (drop_caches not permitted)"
    pub cold_method: String,
    /// Every measured case, in run order.
    pub cases: Vec<Case>,
    /// free-text observations, including what did not improve
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Formats `t` as an RFC 3339 UTC timestamp with second precision, e.g.
/// `2025-03-01T12:34:56Z`. Times before 1970 are clamped to the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// The current time as [`rfc3339`]; what [`Report::created`] should hold.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A file-name-safe stem for `workload`: ASCII letters, digits, `.`, `-`
/// and `_` are kept, everything else becomes `_`.
fn file_stem(workload: &str) -> String {
    let s: String = workload
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') { "report".to_string() } else { s }
}

/// Writes `contents` to `path` through a temporary sibling and a rename, so a
/// reader never sees half a file.
fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

impl Report {
    /// Writes DIR/WORKLOAD.json (pretty), DIR/WORKLOAD.md and DIR/WORKLOAD.svg, creating DIR; returns the paths.
    ///
    /// The paths are returned in that order. Characters of the workload name
    /// other than ASCII letters, digits, `.`, `-`, `_` become `_` in the file
    /// names.
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let stem = file_stem(&self.workload);
        let mut json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        json.push('\n');
        let outputs = [
            (format!("{stem}.json"), json),
            (format!("{stem}.md"), self.markdown()),
            (format!("{stem}.svg"), self.svg()),
        ];
        let mut paths = Vec::with_capacity(outputs.len());
        for (name, contents) in outputs {
            let path = dir.join(name);
            write_atomic(&path, contents.as_bytes())?;
            paths.push(path);
        }
        Ok(paths)
    }

    /// The Markdown document as a string (also used to print to the terminal).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# predictio bench: {}\n", md_inline(&self.workload));
        let fence = code_fence(&self.command);
        let _ = writeln!(out, "{fence}sh\n{}\n{fence}\n", self.command);
        let revision = &self.provenance.git_revision;
        let _ = writeln!(out, "- revision: {}", code_span(if revision.is_empty() { "unknown" } else { revision }));
        if !self.provenance.env.is_empty() {
            let vars: Vec<String> = self.provenance.env.iter().map(|(k, v)| code_span(&format!("{k}={v}"))).collect();
            let _ = writeln!(out, "- environment (set variables that filter or change cases): {}", vars.join(", "));
        }
        let _ = writeln!(out, "- created: {}", md_inline(&self.created));
        let _ = writeln!(out, "- machine: {}", md_inline(&machine_line(&self.machine)));
        let _ = writeln!(out, "- device limits: {}", md_inline(&device_limit_line(&self.machine.device_limit)));
        let _ = writeln!(out, "- cold cache: {}", md_inline(&self.cold_method));
        let settings = serde_json::to_string(&self.settings).unwrap_or_default();
        let _ = writeln!(out, "- settings: {}\n", code_span(&settings));

        let (metric, ab): (Vec<&Case>, Vec<&Case>) = self.cases.iter().partition(|c| c.is_metric());
        if !ab.is_empty() {
            ab_table(&mut out, &ab);
            out.push('\n');
        }
        if !metric.is_empty() {
            metric_table(&mut out, &metric);
            out.push('\n');
        }
        if self.cases.is_empty() {
            out.push_str("No cases were measured.\n\n");
        }
        if !self.notes.is_empty() {
            out.push_str("## Notes\n\n");
            for n in &self.notes {
                let _ = writeln!(out, "- {}", n.trim().replace('\n', "\n  "));
            }
            out.push('\n');
        }
        // One trailing newline.
        while out.ends_with("\n\n") {
            out.pop();
        }
        out
    }

    /// The SVG chart as a string.
    ///
    /// A/B cases: one horizontal bar per case of `ratio_median`, with a
    /// dashed reference line at 1.0 (green bar: faster, orange: slower).
    /// Metric cases: one bar per case of its value relative to its bar's
    /// threshold (parsed from the `bar` text; a tick marks the threshold),
    /// green when `meets_bar`, red when not, grey for a case with no bar.
    /// Both panels when both kinds exist.
    pub fn svg(&self) -> String {
        let (metric, ab): (Vec<&Case>, Vec<&Case>) = self.cases.iter().partition(|c| c.is_metric());
        let mut body = String::new();
        let mut y = 52.0;
        if !ab.is_empty() {
            y = svg_ab_panel(&mut body, &ab, y + 14.0);
        }
        if !metric.is_empty() {
            y = svg_metric_panel(&mut body, &metric, y + 14.0);
        }
        if self.cases.is_empty() {
            let _ = writeln!(
                body,
                r#"<text x="{}" y="{}" text-anchor="middle" fill="{MUTED}">no cases</text>"#,
                SVG_W / 2.0,
                y + 24.0
            );
            y += 36.0;
        }
        let h = (y + 12.0).ceil();
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_W}" height="{h}" viewBox="0 0 {SVG_W} {h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
        );
        let title = format!("predictio bench: {}", self.workload);
        let _ = writeln!(out, "<title>{}</title>", xml_escape(&title));
        let _ = writeln!(out, r#"<rect x="0" y="0" width="{SVG_W}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            out,
            r#"<text x="16" y="26" font-size="18" font-weight="bold" fill="{INK}">{}</text>"#,
            xml_escape(&truncate(&self.workload, 70))
        );
        if !self.created.is_empty() || !self.machine.kernel.is_empty() {
            let sub = format!("{}  {}", self.created, machine_line(&self.machine));
            let _ = writeln!(
                out,
                r#"<text x="16" y="44" font-size="10" fill="{MUTED}">{}</text>"#,
                xml_escape(&truncate(sub.trim(), 130))
            );
        }
        out.push_str(&body);
        out.push_str("</svg>\n");
        out
    }
}

// ---------------------------------------------------------------------------
// Markdown helpers

fn machine_line(m: &crate::machine::Machine) -> String {
    let kernel = if m.kernel.is_empty() { "?" } else { m.kernel.as_str() };
    let device = if m.device.is_empty() { "unknown" } else { m.device.as_str() };
    format!(
        "Linux {kernel}, {} CPUs, {:.1} GiB memory, device {device}, read_ahead_kb {}",
        m.cpus,
        m.mem_bytes as f64 / (1u64 << 30) as f64,
        m.read_ahead_kb
    )
}

fn device_limit_line(d: &crate::machine::DeviceLimit) -> String {
    if d.seq_MBps == 0.0 && d.rand4k_iops_qd1 == 0.0 && d.rand4k_iops_qd64 == 0.0 {
        return "not measured".to_string();
    }
    let deepest = d.by_depth.iter().map(|p| p.depth).max().unwrap_or(64);
    let mut s = format!(
        "rand 4K {} IOPS at QD1, {} IOPS at QD{deepest}; seq (1 MiB O_DIRECT) {:.0} MB/s",
        fmt_count(d.rand4k_iops_qd1),
        fmt_count(d.rand4k_iops_qd64),
        d.seq_MBps
    );
    if !d.by_depth.is_empty() {
        let points: Vec<String> = d
            .by_depth
            .iter()
            .map(|p| format!("QD{} {} IOPS / {:.0} MB/s", p.depth, fmt_count(p.rand4k_iops), p.read1m_MBps))
            .collect();
        let _ = write!(s, " (by depth: {})", points.join(", "));
    }
    let path = if d.probe_path.is_empty() { String::new() } else { format!(" {}", d.probe_path) };
    match d.probe {
        crate::machine::ProbeKind::BlockDevice => {
            let _ = write!(s, "; read from the block device{path} at random places (not cached by a host)");
        }
        crate::machine::ProbeKind::File => {
            let _ = write!(s, "; read from the probe file{path}, read once before (on a VM, the host's cache)");
        }
    }
    if let Some(why) = &d.probe_fallback {
        let _ = write!(s, ", not the block device: {why}");
    }
    if let Some(share) = d.zero_read_share.filter(|&z| z > 0.0) {
        let _ = write!(
            s,
            "; {:.1} % of the reads returned only zeros (unwritten blocks: the limits may be high)",
            share * 100.0
        );
    }
    s
}

/// A count such as IOPS: `13.2 K`, `1.05 M`.
fn fmt_count(x: f64) -> String {
    if !x.is_finite() {
        "–".to_string()
    } else if x.abs() >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x.abs() >= 1e3 {
        format!("{:.1} K", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// A general number with four significant digits (no more than the integer
/// part above 1000); values below 0.01
/// in scientific form (`7.50e-5`).
fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() {
        "–".to_string()
    } else if x == 0.0 {
        "0".to_string()
    } else if a >= 1e3 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else if a >= 1.0 {
        format!("{x:.3}")
    } else if a >= 0.01 {
        format!("{x:.4}")
    } else {
        format!("{x:.2e}")
    }
}

fn fmt_ratio(x: f64) -> String {
    if x.is_finite() { format!("{x:.2}×") } else { "–".to_string() }
}

fn fmt_mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// "median (min–max)" of a time sample, or "–" when empty.
fn fmt_side(xs: &[f64], summary: Option<&Summary>) -> String {
    let s = if xs.is_empty() {
        match summary {
            Some(s) => s.clone(),
            None => return "–".to_string(),
        }
    } else {
        Summary::of(xs)
    };
    format!("{} ({}–{})", fmt_num(s.median), fmt_num(s.min), fmt_num(s.max))
}

/// Numbers of a value that is a number or a non-empty array of numbers.
fn numbers(v: &Value) -> Option<Vec<f64>> {
    match v {
        Value::Number(n) => n.as_f64().map(|x| vec![x]),
        Value::Array(a) if !a.is_empty() => a.iter().map(Value::as_f64).collect(),
        _ => None,
    }
}

fn fmt_extra(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "–".to_string(),
        Some(Value::Number(n)) => n.as_f64().map_or_else(|| n.to_string(), fmt_num),
        Some(v @ Value::Array(_)) => match numbers(v) {
            Some(xs) => format!("{} (med)", fmt_num(median(&xs))),
            None => truncate(&v.to_string(), 40),
        },
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => if *b { "yes" } else { "no" }.to_string(),
        Some(v) => truncate(&v.to_string(), 40),
    }
}

/// A Markdown table cell: `|` escaped, line breaks flattened.
fn cell(s: &str) -> String {
    s.replace('\\', "\\\\").replace('|', "\\|").replace(['\r', '\n'], " ")
}

/// Inline Markdown text on a list line: line breaks flattened.
fn md_inline(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

fn code_span(s: &str) -> String {
    let s = s.replace(['\r', '\n'], " ");
    if s.contains('`') { format!("`` {s} ``") } else { format!("`{s}`") }
}

/// A backtick fence longer than any backtick run in `body`.
fn code_fence(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn row(out: &mut String, cells: &[String]) {
    out.push('|');
    for c in cells {
        out.push(' ');
        out.push_str(&cell(c));
        out.push_str(" |");
    }
    out.push('\n');
}

fn ab_table(out: &mut String, cases: &[&Case]) {
    // Extra columns: keys whose value is numeric in some A/B case, in order
    // of first appearance.
    let mut keys: Vec<&str> = Vec::new();
    for c in cases {
        for (k, v) in &c.extra {
            if numbers(v).is_some() && !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    let mut header: Vec<String> = [
        "case",
        "baseline median s (min–max)",
        "treatment median s (min–max)",
        "median ratio",
        "per-pair ratios",
        "limit s",
        "warm s",
        "resident before",
        "answers identical",
        "issued MiB",
        "wasted MiB",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(keys.iter().map(|k| k.to_string()));
    row(out, &header);
    let _ = writeln!(out, "|{}", " --- |".repeat(header.len()));
    for c in cases {
        let ratios: Vec<String> = c.ratios.iter().map(|r| format!("{r:.2}")).collect();
        let mut cells = vec![
            c.name.clone(),
            fmt_side(&c.baseline_s, c.baseline.as_ref()),
            fmt_side(&c.treatment_s, c.treatment.as_ref()),
            if c.ratios.is_empty() && c.ratio_median == 0.0 { "–".to_string() } else { fmt_ratio(c.ratio_median) },
            if ratios.is_empty() { "–".to_string() } else { ratios.join(", ") },
            c.limit_s.map_or_else(|| "–".to_string(), fmt_num),
            c.warm_s.map_or_else(|| "–".to_string(), fmt_num),
            format!("{:.1} %", c.resident_before * 100.0),
            if c.answers_identical { "yes" } else { "**NO**" }.to_string(),
            fmt_mib(c.issued_bytes),
            fmt_mib(c.wasted_bytes),
        ];
        cells.extend(keys.iter().map(|k| fmt_extra(c.extra.get(*k))));
        row(out, &cells);
    }
}

fn metric_table(out: &mut String, cases: &[&Case]) {
    row(out, &["case", "value", "unit", "bar", "seed", "meets bar"].map(String::from));
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for c in cases {
        let meets = match c.extra.get("meets_bar") {
            Some(Value::Bool(true)) => "yes".to_string(),
            Some(Value::Bool(false)) => "**no**".to_string(),
            other => fmt_extra(other),
        };
        row(
            out,
            &[
                c.name.clone(),
                fmt_extra(c.extra.get("value")),
                fmt_extra(c.extra.get("unit")),
                fmt_extra(c.extra.get("bar")),
                fmt_extra(c.extra.get("seed")),
                meets,
            ],
        );
    }
}

// ---------------------------------------------------------------------------
// SVG helpers

const SVG_W: f64 = 800.0;
const ROW_H: f64 = 24.0;
const BAR_H: f64 = 16.0;
const LABEL_END: f64 = 236.0;
const PLOT_X0: f64 = 244.0;
const INK: &str = "#222222";
/// A white outline under value labels so reference lines don't cut through them.
const HALO: &str = r#"stroke="white" stroke-width="3" paint-order="stroke""#;
const MUTED: &str = "#666666";
const GOOD: &str = "#2e9e44";
const BAD: &str = "#d1382f";
const SLOWER: &str = "#e08a1e";
/// A metric case with no bar.
const NO_BAR: &str = "#8c8c8c";

/// Escapes the five XML special characters.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters other than tab/newline are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `s` cut to at most `n` characters, with an ellipsis when cut.
fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A tick step (0.25, 0.5, 1, 2, 5, 10, 20, 50, ...) giving at most ~8
/// ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    for step in [0.25, 0.5] {
        if max / step <= 8.0 {
            return step;
        }
    }
    let mut decade = 1.0;
    for _ in 0..30 {
        for m in [1.0, 2.0, 5.0] {
            if max / (m * decade) <= 8.0 {
                return m * decade;
            }
        }
        decade *= 10.0;
    }
    max.max(1.0)
}

fn svg_case_label(out: &mut String, name: &str, y_mid: f64) {
    let _ = writeln!(
        out,
        r#"<text x="{LABEL_END}" y="{:.1}" text-anchor="end" fill="{INK}"><title>{}</title>{}</text>"#,
        y_mid + 4.0,
        xml_escape(name),
        xml_escape(&truncate(name, 36))
    );
}

/// Draws the A/B panel starting at `y`; returns the y below it.
fn svg_ab_panel(out: &mut String, cases: &[&Case], mut y: f64) -> f64 {
    const PLOT_X1: f64 = 720.0;
    let w = PLOT_X1 - PLOT_X0;
    let _ = writeln!(
        out,
        r#"<text x="16" y="{y:.1}" font-weight="bold" fill="{INK}">median ratio baseline / treatment (above 1× = faster)</text>"#
    );
    y += 12.0;
    let max_r = cases.iter().map(|c| c.ratio_median).filter(|r| r.is_finite()).fold(1.0_f64, f64::max);
    let max_x = max_r * 1.1;
    let sx = |v: f64| PLOT_X0 + (v.clamp(0.0, max_x) / max_x) * w;
    let top = y;
    for (i, c) in cases.iter().enumerate() {
        let y0 = top + i as f64 * ROW_H;
        let mid = y0 + ROW_H / 2.0;
        svg_case_label(out, &c.name, mid);
        let r = c.ratio_median;
        let r_ok = if r.is_finite() { r.max(0.0) } else { 0.0 };
        let colour = if r_ok >= 1.0 { GOOD } else { SLOWER };
        let x1 = sx(r_ok);
        let _ = writeln!(
            out,
            r#"<rect x="{PLOT_X0}" y="{:.1}" width="{:.1}" height="{BAR_H}" fill="{colour}"><title>{}: {}</title></rect>"#,
            mid - BAR_H / 2.0,
            (x1 - PLOT_X0).max(0.0),
            xml_escape(&c.name),
            xml_escape(&fmt_ratio(r))
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" fill="{INK}" {HALO}>{}</text>"#,
            // Right of the bar and of the 1× line, whichever is further.
            x1.max(sx(1.0) + 1.0) + 5.0,
            mid + 4.0,
            xml_escape(&fmt_ratio(r))
        );
    }
    let bottom = top + cases.len() as f64 * ROW_H;
    // Axis with ticks.
    let _ = writeln!(
        out,
        r#"<line x1="{PLOT_X0}" y1="{bottom:.1}" x2="{PLOT_X1}" y2="{bottom:.1}" stroke="{MUTED}" stroke-width="1"/>"#
    );
    let step = nice_step(max_x);
    let mut t = 0.0;
    while t <= max_x + 1e-9 {
        let x = sx(t);
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="{MUTED}"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="{MUTED}">{}×</text>"#,
            bottom + 4.0,
            bottom + 15.0,
            trim_float(t)
        );
        t += step;
    }
    // Reference line at 1.0.
    let x1 = sx(1.0);
    let _ = writeln!(
        out,
        r#"<line x1="{x1:.1}" y1="{:.1}" x2="{x1:.1}" y2="{bottom:.1}" stroke="{INK}" stroke-width="1.5" stroke-dasharray="4 3"/>"#,
        top - 4.0
    );
    bottom + 24.0
}

/// A metric value for a chart label: large numbers with K/M/G prefixes.
fn svg_value(v: Option<&Value>) -> String {
    match v.and_then(Value::as_f64) {
        Some(x) if x.is_finite() && x.abs() >= 1e9 => format!("{:.2} G", x / 1e9),
        Some(x) if x.is_finite() && x.abs() >= 1e4 => fmt_count(x),
        _ => fmt_extra(v),
    }
}

/// `2`, `2.5`, `0.25` — no trailing zeros.
fn trim_float(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The threshold in a bar text such as `<= 20`, `≥ 2 M/s`, `>= 10 M/s`,
/// in the value's unit: the first number, times K/M/G when that prefix
/// follows it and the value's unit does not itself start with it.
fn bar_threshold(bar: &str, unit: &str) -> Option<f64> {
    let start = bar.find(|c: char| c.is_ascii_digit())?;
    let rest = &bar[start..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let mut x: f64 = rest[..end].parse().ok()?;
    let after = rest[end..].trim_start();
    let unit = unit.trim_start();
    if let Some(p) = after.chars().next() {
        let mult = match p {
            'k' | 'K' => 1e3,
            'M' => 1e6,
            'G' => 1e9,
            _ => 1.0,
        };
        if mult != 1.0 && !unit.starts_with(p) {
            x *= mult;
        }
    }
    (x > 0.0 && x.is_finite()).then_some(x)
}

/// Draws the metric panel starting at `y`; returns the y below it.
fn svg_metric_panel(out: &mut String, cases: &[&Case], mut y: f64) -> f64 {
    const PLOT_X1: f64 = 540.0;
    const MAX_NORM: f64 = 3.0;
    let w = PLOT_X1 - PLOT_X0;
    let _ = writeln!(
        out,
        r#"<text x="16" y="{y:.1}" font-weight="bold" fill="{INK}">metrics: bar length relative to each case's bar (tick); green meets the bar, red misses, grey has none</text>"#
    );
    y += 12.0;
    let str_of = |c: &Case, k: &str| match c.extra.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    };
    // Per case: (value, threshold) normalised so that the threshold is 1.
    let rows: Vec<(f64, Option<f64>)> = cases
        .iter()
        .map(|c| {
            let v = c.extra.get("value").and_then(Value::as_f64).unwrap_or(f64::NAN);
            let th = bar_threshold(&str_of(c, "bar"), &str_of(c, "unit"))
                .filter(|th| v.is_finite() && (1e-3..=1e3).contains(&(v.abs() / th)));
            (v, th)
        })
        .collect();
    // Cases without a usable threshold are scaled against the largest value
    // of the same unit.
    let norm: Vec<f64> = cases
        .iter()
        .zip(&rows)
        .map(|(c, &(v, th))| match th {
            Some(th) => v / th,
            None => {
                let unit = str_of(c, "unit");
                let max = cases
                    .iter()
                    .zip(&rows)
                    .filter(|(o, _)| str_of(o, "unit") == unit)
                    .map(|(_, &(ov, _))| ov.abs())
                    .filter(|x| x.is_finite())
                    .fold(0.0, f64::max);
                if max > 0.0 && v.is_finite() { v.abs() / max } else { 0.0 }
            }
        })
        .collect();
    let max_x = (norm.iter().copied().filter(|x| x.is_finite()).fold(1.0, f64::max) * 1.1).min(MAX_NORM);
    let sx = |v: f64| PLOT_X0 + (v.clamp(0.0, max_x) / max_x) * w;
    let top = y;
    for (i, c) in cases.iter().enumerate() {
        let mid = top + i as f64 * ROW_H + ROW_H / 2.0;
        svg_case_label(out, &c.name, mid);
        let colour = match c.meets_bar() {
            Some(true) => GOOD,
            Some(false) => BAD,
            None => NO_BAR,
        };
        let n = norm[i].max(0.0);
        let x1 = sx(n);
        let bar = match c.meets_bar() {
            Some(_) => format!(" (bar {})", str_of(c, "bar")),
            None => String::new(),
        };
        let label = format!("{} {}{bar}", svg_value(c.extra.get("value")), str_of(c, "unit"));
        let _ = writeln!(
            out,
            r#"<rect x="{PLOT_X0}" y="{:.1}" width="{:.1}" height="{BAR_H}" fill="{colour}"><title>{}</title></rect>"#,
            mid - BAR_H / 2.0,
            (x1 - PLOT_X0).max(0.0),
            xml_escape(&format!("{}: {label}; seed {}", c.name, str_of(c, "seed")))
        );
        if n > max_x {
            // Clipped: a chevron at the end says "more than shown".
            let _ = writeln!(
                out,
                r#"<path d="M{:.1},{:.1} l6,{:.1} l-6,{:.1} z" fill="{colour}"/>"#,
                PLOT_X1,
                mid - BAR_H / 2.0,
                BAR_H / 2.0,
                BAR_H / 2.0
            );
        }
        if rows[i].1.is_some() {
            let xt = sx(1.0);
            let _ = writeln!(
                out,
                r#"<line x1="{xt:.1}" y1="{:.1}" x2="{xt:.1}" y2="{:.1}" stroke="{INK}" stroke-width="2"/>"#,
                mid - BAR_H / 2.0 - 3.0,
                mid + BAR_H / 2.0 + 3.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" fill="{INK}" {HALO}>{}</text>"#,
            // Right of the bar and of the threshold tick, whichever is further.
            PLOT_X1.min(x1).max(if rows[i].1.is_some() { sx(1.0) + 1.0 } else { 0.0 }) + 10.0,
            mid + 4.0,
            xml_escape(&truncate(&label, 34))
        );
    }
    let bottom = top + cases.len() as f64 * ROW_H;
    let _ = writeln!(
        out,
        r#"<line x1="{PLOT_X0}" y1="{bottom:.1}" x2="{PLOT_X1}" y2="{bottom:.1}" stroke="{MUTED}" stroke-width="1"/>"#
    );
    bottom + 12.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentile() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0]), 3.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(percentile(&[], 50.0), 0.0);
        let xs: Vec<f64> = (1..=10).map(f64::from).rev().collect();
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert_eq!(percentile(&xs, 10.0), 1.0);
        assert_eq!(percentile(&xs, 11.0), 2.0);
        assert_eq!(percentile(&xs, 50.0), 5.0);
        assert_eq!(percentile(&xs, 90.0), 9.0);
        assert_eq!(percentile(&xs, 99.0), 10.0);
        assert_eq!(percentile(&xs, 100.0), 10.0);
        assert_eq!(percentile(&xs, 250.0), 10.0);
        assert_eq!(percentile(&xs, f64::NAN), 1.0);
        // NaN does not panic the sort.
        let _ = median(&[1.0, f64::NAN, 0.5]);
    }

    #[test]
    fn summary_of() {
        assert_eq!(Summary::of(&[]), Summary::default());
        assert_eq!(Summary::of(&[5.0, 1.0, 3.0, 2.0]), Summary { min: 1.0, median: 2.5, max: 5.0 });
        let s = Summary::of(&[2.0, f64::NAN, 1.0]);
        assert_eq!(s.min, 1.0);
    }

    #[test]
    fn ab_ratio_math() {
        let c = Case::ab("scan", vec![2.0, 3.0, 4.0, 9.0], vec![1.0, 1.0, 4.0]);
        assert_eq!(c.ratios, vec![2.0, 3.0, 1.0]);
        assert_eq!(c.ratio_median, 2.0);
        assert_eq!(c.baseline, Some(Summary { min: 2.0, median: 3.5, max: 9.0 }));
        assert_eq!(c.treatment, Some(Summary { min: 1.0, median: 1.0, max: 4.0 }));
        assert!(c.answers_identical);
        let z = Case::ab("z", vec![1.0, 2.0], vec![0.0, 1.0]);
        assert_eq!(z.ratios, vec![0.0, 2.0]);
        let e = Case::ab("e", vec![], vec![]);
        assert!(e.ratios.is_empty());
        assert_eq!(e.ratio_median, 0.0);
        assert_eq!(e.baseline, None);
    }

    #[test]
    fn rfc3339_format() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400 + 3_661); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T01:01:01Z");
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_599);
        assert_eq!(rfc3339(t), "2025-12-31T23:59:59Z");
        assert_eq!(now_rfc3339().len(), 20);
    }

    fn sample() -> Report {
        let mut a = Case::ab("scan|1000", vec![1.0, 1.2, 1.1, 0.9, 1.0], vec![0.2, 0.25, 0.2, 0.3, 0.2]);
        a.limit_s = Some(0.05);
        a.warm_s = Some(0.000_075);
        a.resident_before = 0.001;
        a.issued_bytes = 10 << 20;
        a.wasted_bytes = 1 << 20;
        a.extra.insert("preload_s".into(), serde_json::json!([0.9, 0.8, 1.0]));
        a.extra.insert("p99_s".into(), serde_json::json!(0.004));
        a.extra.insert("backend".into(), serde_json::json!("uring"));
        let b = Case::ab("scan-10", vec![0.5; 5], vec![0.6; 5]);
        let m = Case::metric("executor <skipped> & co", 12.3, "ns/page", "tens of ns/page", Some(("<= 20", true)));
        let m2 = Case::metric("hints", 0.4e6, "hints/s", "300–500 K/s", Some((">= 1 M/s", false)));
        let m3 = Case::metric("latency p50", 480.0, "µs", "-", None);
        Report {
            workload: "sqlite-scan".into(),
            command: "predictio bench sqlite-scan --pairs 5".into(),
            provenance: Provenance {
                git_revision: "0123abc-dirty".into(),
                env: [("PREDICTIO_BENCH_SQLITE_ONLY".to_owned(), "scan-1000".to_owned())].into(),
            },
            created: now_rfc3339(),
            machine: crate::machine::Machine {
                kernel: "6.1.0".into(),
                cpus: 2,
                mem_bytes: 8 << 30,
                device: "vda".into(),
                read_ahead_kb: 128,
                device_limit: crate::machine::DeviceLimit {
                    probe: crate::machine::ProbeKind::BlockDevice,
                    probe_path: "/dev/vda".into(),
                    probe_fallback: None,
                    zero_read_share: Some(0.0),
                    seq_MBps: 2800.0,
                    rand4k_iops_qd1: 13_000.0,
                    rand4k_iops_qd64: 99_000.0,
                    by_depth: vec![crate::machine::DepthPoint {
                        depth: 64,
                        rand4k_iops: 99_000.0,
                        read1m_MBps: 2800.0,
                    }],
                },
            },
            settings: serde_json::json!({"rows": 1000, "pairs": 5}),
            cold_method: "drop_caches".into(),
            cases: vec![a, b, m, m2, m3],
            notes: vec!["point reads did not improve".into(), "two\nlines".into()],
        }
    }

    #[test]
    fn markdown_table() {
        let md = sample().markdown();
        assert!(md.starts_with("# predictio bench: sqlite-scan"));
        assert!(
            md.contains("```sh\npredictio bench sqlite-scan --pairs 5\n```\n\n- revision: `0123abc-dirty`\n"),
            "{md}"
        );
        assert!(md.contains(
            "- environment (set variables that filter or change cases): `PREDICTIO_BENCH_SQLITE_ONLY=scan-1000`\n"
        ));
        assert!(md.contains("rand 4K 13.0 K IOPS at QD1, 99.0 K IOPS at QD64; seq (1 MiB O_DIRECT) 2800 MB/s"));
        assert!(md.contains("; read from the block device /dev/vda at random places"), "{md}");
        assert!(md.contains(r#"- settings: `{"pairs":5,"rows":1000}`"#), "{md}");
        assert!(md.contains("| case | baseline median s (min–max) |"));
        assert!(md.contains("| p99_s | preload_s |"), "{md}");
        assert!(!md.contains("| backend |"));
        // The pipe in the case name is escaped, and the row is complete.
        let row = md.lines().find(|l| l.starts_with("| scan\\|1000 |")).expect("row of scan|1000");
        assert!(row.contains("| 5.00× |"), "{row}");
        assert!(row.contains("| 1.000 (0.9000–1.200) |"), "{row}");
        assert!(row.contains("| 7.50e-5 |"), "{row}");
        assert!(row.contains("| 10.0 | 1.0 |"), "{row}");
        assert!(row.contains("| 4.00e-3 | 0.9000 (med) |"), "{row}");
        assert!(row.contains("| 0.1 % | yes |"), "{row}");
        // Unescaped pipes = column separators: 11 fixed + 2 extras + 1.
        assert_eq!(row.replace("\\|", "").matches('|').count(), 14);
        let row10 = md.lines().find(|l| l.starts_with("| scan-10 |")).expect("row of scan-10");
        assert!(row10.contains("| 0.83× |"), "{row10}");
        assert!(row10.ends_with("| – | – |"), "{row10}");
        assert!(md.contains("| case | value | unit | bar | seed | meets bar |"));
        assert!(md.contains("| executor <skipped> & co | 12.30 | ns/page | <= 20 | tens of ns/page | yes |"), "{md}");
        assert!(md.contains("| hints | 400000 | hints/s | >= 1 M/s | 300–500 K/s | **no** |"), "{md}");
        assert!(md.contains("| latency p50 | 480.0 | µs | – | - | – |"), "{md}");
        assert!(md.contains("## Notes\n\n- point reads did not improve\n- two\n  lines\n"));
        assert!(md.ends_with('\n') && !md.ends_with("\n\n"));
    }

    #[test]
    fn svg_well_formed_ish() {
        let r = sample();
        let svg = r.svg();
        assert!(svg.starts_with("<svg "));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("executor &lt;skipped&gt; &amp; co"));
        assert!(!svg.contains("<skipped>"));
        assert!(svg.contains("5.00×"));
        assert!(svg.contains("12.30 ns/page (bar &lt;= 20)"));
        assert!(svg.contains(GOOD) && svg.contains(BAD) && svg.contains(NO_BAR));
        assert!(svg.contains("480.0 µs</text>"), "a case with no bar shows none");
        assert!(svg.contains("stroke-dasharray")); // the 1.0 reference line
        // Balanced text/rect/title elements.
        for tag in ["text", "title", "svg"] {
            assert_eq!(svg.matches(&format!("<{tag}")).count(), svg.matches(&format!("</{tag}>")).count(), "{tag}");
        }
        // Empty report still renders.
        let e = Report::default().svg();
        assert!(e.starts_with("<svg ") && e.trim_end().ends_with("</svg>"));
        assert!(Report::default().markdown().contains("No cases"));
    }

    #[test]
    fn bar_thresholds() {
        assert_eq!(bar_threshold("<= 20", "ns/page"), Some(20.0));
        assert_eq!(bar_threshold(">= 2 M/s", "events/s"), Some(2e6));
        assert_eq!(bar_threshold("≥ 10 M/s", "M/s"), Some(10.0));
        assert_eq!(bar_threshold("within 2 %", "%"), Some(2.0));
        assert_eq!(bar_threshold("none", "x"), None);
    }

    #[test]
    fn meets_bar_only_where_a_case_has_a_bar() {
        let with = serde_json::to_value(Case::metric("m", 1.0, "x", "-", Some(("<= 2", true)))).expect("json");
        assert_eq!(with["bar"], serde_json::json!("<= 2"));
        assert_eq!(with["meets_bar"], serde_json::json!(true));
        let missed = Case::metric("m", 3.0, "x", "-", Some(("<= 2", false)));
        assert_eq!(missed.meets_bar(), Some(false));
        let none = Case::metric("m", 1.0, "x", "-", None);
        assert_eq!(none.meets_bar(), None);
        let json = serde_json::to_value(&none).expect("json");
        let keys: Vec<&str> = json.as_object().expect("object").keys().map(String::as_str).collect();
        assert!(!keys.contains(&"meets_bar") && !keys.contains(&"bar"), "{keys:?}");
        assert!(keys.contains(&"value") && keys.contains(&"unit"), "{keys:?}");
    }

    #[test]
    fn provenance_is_top_level_in_the_result_file() {
        let r = sample();
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["git_revision"], serde_json::json!("0123abc-dirty"));
        assert_eq!(json["env"], serde_json::json!({"PREDICTIO_BENCH_SQLITE_ONLY": "scan-1000"}));
        assert!(json.get("provenance").is_none());
        // This binary's own revision is embedded and never empty.
        assert!(!Provenance::capture().git_revision.is_empty());
    }

    #[test]
    fn json_round_trip() {
        let r = sample();
        let json = serde_json::to_string_pretty(&r).expect("serialise");
        let back: Report = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(serde_json::to_value(&back).expect("v"), serde_json::to_value(&r).expect("v"));
        assert_eq!(back.cases[0].ratios, r.cases[0].ratios);
        assert_eq!(back.cases[0].extra["preload_s"], serde_json::json!([0.9, 0.8, 1.0]));
        assert_eq!(back.cases[2].extra["meets_bar"], serde_json::json!(true));
        assert_eq!(back.provenance, r.provenance);
        // The minimal schema of BENCHMARKS.md parses, with defaults.
        let min = r#"{"workload":"w","command":"c","created":"","machine":{"kernel":"k","cpus":2,
            "mem_bytes":0,"device":"vda","read_ahead_kb":8192,"device_limit":{"seq_MBps":0,
            "rand4k_iops_qd1":0,"rand4k_iops_qd64":0,"by_depth":[]}},"settings":null,
            "cold_method":"drop_caches","cases":[{"name":"scan-1000","baseline_s":[1.0],
            "treatment_s":[0.5],"ratio_median":2.0}]}"#;
        let m: Report = serde_json::from_str(min).expect("minimal");
        assert!(m.cases[0].answers_identical);
        assert!(m.cases[0].extra.is_empty());
        // Write to a scratch directory.
        let dir = std::env::temp_dir().join(format!("predictio-report-test-{}", std::process::id()));
        let paths = r.write(&dir).expect("write");
        assert_eq!(paths.len(), 3);
        assert!(paths[0].ends_with("sqlite-scan.json"));
        let text = std::fs::read_to_string(&paths[0]).expect("read back");
        let again: Report = serde_json::from_str(&text).expect("parse written");
        assert_eq!(again.workload, "sqlite-scan");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
