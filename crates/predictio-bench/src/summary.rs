//! The README's table of headline numbers, generated from the committed
//! result files (`docs/results/WORKLOAD.json`), so that the numbers a user
//! reads cannot drift from the runs they come from.
//!
//! [`render`] reads the result files and returns the Markdown block: one row
//! per workload's headline case(s), each with the medians of baseline and
//! predictio, the median of per-pair ratios, the closure (the measurement protocol:
//! `(baseline − predictio) / (baseline − limit)`, the limit being `ideal_s`
//! where a run measured it, else the warm run), the limit, a peer where the
//! workload has one, and the date (and git revision, where the file records
//! one) of the run. [`check_readme`] compares a README's block between
//! [`BEGIN_MARKER`] and [`END_MARKER`] with what [`render`] prints and names
//! the first line that differs.
//!
//! Field names differ between workloads, so each workload's rows are written
//! out explicitly below; a missing or non-numeric field is a
//! [`SummaryError::MissingField`] naming the file, the case and the field,
//! never a silently empty cell. Nothing here measures anything.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Workload;
use crate::report::median;

/// The line that opens the generated block in a README.
pub const BEGIN_MARKER: &str = "<!-- results:begin -->";
/// The line that closes the generated block in a README.
pub const END_MARKER: &str = "<!-- results:end -->";

/// The workloads in the table, in table order. `backends` compares the
/// executor's backends with each other, not predictio with a baseline, so it
/// has no headline row.
pub const HEADLINE_WORKLOADS: &[Workload] = &[
    Workload::Launch,
    Workload::SqliteScan,
    Workload::LmdbScan,
    Workload::RocksDb,
    Workload::LlmLoad,
    Workload::ModelLoad,
    Workload::AccessPatterns,
    Workload::ShuffleRead,
    Workload::SeqRead,
    Workload::LargeRead,
    Workload::NoStructure,
    Workload::ControlPath,
    Workload::DaemonCost,
];

/// Why the table could not be rendered or a README's block does not match.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A result file is not JSON.
    #[error("{path}: not JSON: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// A result file is for another workload than its name says.
    #[error("{path}: \"workload\" is {found:?}, expected {expected:?}")]
    WrongWorkload {
        /// The file.
        path: PathBuf,
        /// The workload its name says.
        expected: &'static str,
        /// What the file says.
        found: String,
    },
    /// A headline case is not in the result file.
    #[error("{path}: no case named {case:?}")]
    MissingCase {
        /// The file.
        path: PathBuf,
        /// The case looked for.
        case: String,
    },
    /// A field the table needs is missing or has the wrong type.
    #[error("{path}: case {case:?}: field `{field}` missing or not {expected}")]
    MissingField {
        /// The file.
        path: PathBuf,
        /// The case (empty for a file-level field).
        case: String,
        /// The field (`a.b` for a nested one).
        field: String,
        /// The type it should have.
        expected: &'static str,
    },
    /// The README's generated block is missing or differs from the render.
    #[error("{path}: {source}")]
    Block {
        /// The README.
        path: PathBuf,
        /// How it differs.
        source: BlockError,
    },
}

/// How a README's generated block differs from [`render`]'s output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// No line equal to [`BEGIN_MARKER`].
    #[error("no line {BEGIN_MARKER}")]
    NoBegin,
    /// No line equal to [`END_MARKER`] after the begin marker.
    #[error("no line {END_MARKER} after {BEGIN_MARKER}")]
    NoEnd,
    /// The first line (1-based, in the README) where the block and the
    /// generated table differ; a side that ended is shown as `<end of block>`.
    #[error(
        "line {line} differs from the generated table (regenerate it with `predictio-bench summary`):\n  expected: {expected}\n  found:    {found}"
    )]
    Differs {
        /// 1-based line number in the README.
        line: usize,
        /// The generated line.
        expected: String,
        /// The README's line.
        found: String,
    },
}

/// Renders the headline table from the result files in `results_dir`
/// (normally `docs/results`), every workload of [`HEADLINE_WORKLOADS`].
///
/// # Errors
///
/// A result file that is missing, not JSON, for another workload, or lacks a
/// headline case or a field the table needs.
pub fn render(results_dir: &Path) -> Result<String, SummaryError> {
    render_workloads(results_dir, HEADLINE_WORKLOADS)
}

/// Renders the table for `workloads` only (in the order given).
///
/// # Errors
///
/// As [`render`].
pub fn render_workloads(results_dir: &Path, workloads: &[Workload]) -> Result<String, SummaryError> {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &workload in workloads {
        if workload == Workload::Backends {
            continue;
        }
        let file = ResultFile::load(results_dir, workload)?;
        rows.extend(rows_of(workload, &file, &mut notes)?);
    }
    let mut out = String::new();
    out.push_str(
        "Generated by `predictio-bench summary` from `docs/results/*.json` (do not edit by hand). \
         Ratios are medians of per-pair ratios (above 1: faster); closure is \
         (baseline − predictio) / (baseline − limit), the share of the reachable gain reached; \
         other sides are peers or variants, with their own ratio to the baseline.\n\n",
    );
    out.push_str("| workload | case | baseline → predictio | result | closure | limit | other sides (ratio) | run |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for row in &rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            row.workload,
            row.case,
            row.times.as_deref().unwrap_or("—"),
            row.result,
            row.closure.map_or_else(|| "—".to_owned(), pct0),
            row.limit.as_deref().unwrap_or("—"),
            row.peer.as_deref().unwrap_or("—"),
            row.run,
        );
    }
    if !notes.is_empty() {
        out.push('\n');
        for note in &notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    Ok(out)
}

/// Checks that `readme`'s block between [`BEGIN_MARKER`] and [`END_MARKER`]
/// is exactly what [`render`] makes of `results_dir`.
///
/// # Errors
///
/// [`render`]'s errors, an unreadable README, or [`SummaryError::Block`]
/// naming the first line that differs.
pub fn check_readme(readme: &Path, results_dir: &Path) -> Result<(), SummaryError> {
    let generated = render(results_dir)?;
    let text =
        std::fs::read_to_string(readme).map_err(|source| SummaryError::Read { path: readme.to_owned(), source })?;
    check_block(&text, &generated).map_err(|source| SummaryError::Block { path: readme.to_owned(), source })
}

/// Compares the block of `readme` between the marker lines with `generated`,
/// line by line (a final newline on either side does not count).
///
/// # Errors
///
/// A missing marker, or the first differing line with its README line number.
pub fn check_block(readme: &str, generated: &str) -> Result<(), BlockError> {
    let lines: Vec<&str> = readme.lines().collect();
    let begin = lines.iter().position(|l| l.trim_end() == BEGIN_MARKER).ok_or(BlockError::NoBegin)?;
    let end = lines[begin + 1..]
        .iter()
        .position(|l| l.trim_end() == END_MARKER)
        .map(|i| begin + 1 + i)
        .ok_or(BlockError::NoEnd)?;
    let block = &lines[begin + 1..end];
    let wanted: Vec<&str> = generated.lines().collect();
    for i in 0..block.len().max(wanted.len()) {
        let found = block.get(i).copied();
        let expected = wanted.get(i).copied();
        if found != expected {
            return Err(BlockError::Differs {
                line: begin + 2 + i,
                expected: expected.unwrap_or("<end of block>").to_owned(),
                found: found.unwrap_or("<end of block>").to_owned(),
            });
        }
    }
    Ok(())
}

/// One table row.
struct Row {
    workload: &'static str,
    case: String,
    times: Option<String>,
    result: String,
    closure: Option<f64>,
    limit: Option<String>,
    peer: Option<String>,
    run: String,
}

/// A parsed result file.
struct ResultFile {
    path: PathBuf,
    json: Value,
    run: String,
}

impl ResultFile {
    fn load(dir: &Path, workload: Workload) -> Result<Self, SummaryError> {
        let path = dir.join(format!("{}.json", workload.name()));
        let text =
            std::fs::read_to_string(&path).map_err(|source| SummaryError::Read { path: path.clone(), source })?;
        let json: Value =
            serde_json::from_str(&text).map_err(|source| SummaryError::Parse { path: path.clone(), source })?;
        let found = json.get("workload").and_then(Value::as_str).ok_or_else(|| SummaryError::MissingField {
            path: path.clone(),
            case: String::new(),
            field: "workload".into(),
            expected: "a string",
        })?;
        if found != workload.name() {
            return Err(SummaryError::WrongWorkload { path, expected: workload.name(), found: found.to_owned() });
        }
        let created = json.get("created").and_then(Value::as_str).ok_or_else(|| SummaryError::MissingField {
            path: path.clone(),
            case: String::new(),
            field: "created".into(),
            expected: "a string",
        })?;
        let mut run = created.get(..10).unwrap_or(created).to_owned();
        if let Some(rev) = json.get("git_revision").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            let _ = write!(run, " `{}`", rev.get(..7).unwrap_or(rev));
        }
        Ok(Self { path, json, run })
    }

    fn cases(&self) -> Result<Vec<Case<'_>>, SummaryError> {
        let list = self.json.get("cases").and_then(Value::as_array).ok_or_else(|| SummaryError::MissingField {
            path: self.path.clone(),
            case: String::new(),
            field: "cases".into(),
            expected: "an array",
        })?;
        list.iter()
            .map(|json| {
                let name = json.get("name").and_then(Value::as_str).ok_or_else(|| SummaryError::MissingField {
                    path: self.path.clone(),
                    case: String::new(),
                    field: "cases[].name".into(),
                    expected: "a string",
                })?;
                Ok(Case { file: self, json, name })
            })
            .collect()
    }

    fn case(&self, name: &str) -> Result<Case<'_>, SummaryError> {
        self.cases()?
            .into_iter()
            .find(|c| c.name == name)
            .ok_or_else(|| SummaryError::MissingCase { path: self.path.clone(), case: name.to_owned() })
    }
}

/// One case of a result file.
struct Case<'a> {
    file: &'a ResultFile,
    json: &'a Value,
    name: &'a str,
}

impl Case<'_> {
    fn missing(&self, field: &str, expected: &'static str) -> SummaryError {
        SummaryError::MissingField {
            path: self.file.path.clone(),
            case: self.name.to_owned(),
            field: field.to_owned(),
            expected,
        }
    }

    /// A numeric field (`a.b` for a nested one).
    fn num(&self, field: &str) -> Result<f64, SummaryError> {
        let mut v = self.json;
        for part in field.split('.') {
            v = v.get(part).ok_or_else(|| self.missing(field, "a number"))?;
        }
        v.as_f64().ok_or_else(|| self.missing(field, "a number"))
    }

    fn opt_num(&self, field: &str) -> Option<f64> {
        self.json.get(field).and_then(Value::as_f64)
    }

    fn string(&self, field: &str) -> Result<&str, SummaryError> {
        self.json.get(field).and_then(Value::as_str).ok_or_else(|| self.missing(field, "a string"))
    }

    fn boolean(&self, field: &str) -> Result<bool, SummaryError> {
        self.json.get(field).and_then(Value::as_bool).ok_or_else(|| self.missing(field, "a boolean"))
    }

    /// The median of a list of seconds (a peer's or another side's passes).
    fn list_median(&self, field: &str) -> Result<f64, SummaryError> {
        let list = self.json.get(field).and_then(Value::as_array).ok_or_else(|| self.missing(field, "an array"))?;
        let xs: Option<Vec<f64>> = list.iter().map(Value::as_f64).collect();
        match xs {
            Some(xs) if !xs.is_empty() => Ok(median(&xs)),
            _ => Err(self.missing(field, "a non-empty array of numbers")),
        }
    }

    fn baseline(&self) -> Result<f64, SummaryError> {
        self.num("baseline.median")
    }

    fn treatment(&self) -> Result<f64, SummaryError> {
        self.num("treatment.median")
    }

    /// The limit closure is measured against: `ideal_s` where measured, else `warm_s`.
    fn limit(&self) -> Result<(f64, &'static str), SummaryError> {
        match self.opt_num("ideal_s") {
            Some(ideal) if ideal > 0.0 => Ok((ideal, "ideal")),
            _ => Ok((self.num("warm_s")?, "warm")),
        }
    }

    /// ` (bar …: met)` where the case records its bar.
    fn bar_suffix(&self) -> String {
        let met = self.json.get("meets_bar").and_then(Value::as_bool);
        let bar = self.json.get("bar").and_then(Value::as_str).filter(|b| !b.is_empty() && *b != "report");
        match (bar, met) {
            (Some(bar), Some(met)) => format!(" (bar {bar}: {})", if met { "met" } else { "**not met**" }),
            (None, Some(false)) => " (bar **not met**)".to_owned(),
            _ => String::new(),
        }
    }

    /// A row comparing baseline and treatment, with closure against the limit.
    fn ab_row(&self, workload: Workload, result_extra: &str) -> Result<Row, SummaryError> {
        self.ab_row_with(workload, self.name.to_owned(), self.treatment()?, self.num("ratio_median")?, result_extra)
    }

    fn ab_row_with(
        &self,
        workload: Workload,
        case: String,
        treatment: f64,
        ratio: f64,
        result_extra: &str,
    ) -> Result<Row, SummaryError> {
        let baseline = self.baseline()?;
        let (limit, kind) = self.limit()?;
        Ok(Row {
            workload: workload.name(),
            case,
            times: Some(format!("{} → {}", secs(baseline), secs(treatment))),
            result: format!("{}{result_extra}{}", times_x(ratio), self.bar_suffix()),
            closure: closure(baseline, treatment, limit),
            limit: Some(format!("{kind} {}", secs(limit))),
            peer: None,
            run: self.file.run.clone(),
        })
    }

    /// A row for a single figure with its unit (control path, daemon cost).
    fn value_row(&self, workload: Workload) -> Result<Row, SummaryError> {
        let value = self.num("value")?;
        let unit = self.string("unit")?;
        let sep = if unit.starts_with('/') { "" } else { " " };
        Ok(Row {
            workload: workload.name(),
            case: self.name.to_owned(),
            times: None,
            result: format!("{}{sep}{unit}{}", sig3(value), self.bar_suffix()),
            closure: None,
            limit: None,
            peer: None,
            run: self.file.run.clone(),
        })
    }
}

/// The rows of one workload, each workload's fields read explicitly.
fn rows_of(workload: Workload, file: &ResultFile, notes: &mut Vec<String>) -> Result<Vec<Row>, SummaryError> {
    let mut rows = Vec::new();
    match workload {
        Workload::Launch => {
            for at in ["", " @ra128"] {
                let mut reductions = Vec::new();
                let mut closures = Vec::new();
                let mut programs = 0usize;
                let mut preload_learned = 0usize;
                for case in file.cases()? {
                    let at_ra128 = case.name.ends_with(" @ra128");
                    if at_ra128 == at.is_empty() {
                        continue;
                    }
                    let reduction = case.num("reduction_pct")?;
                    let mut row = case.ab_row(workload, &format!(", {}", change(reduction, 0)))?;
                    let exact = case.num("exact_ratio_median").ok().map(|r| format!("exact {}, ", times_x(r)));
                    row.peer = Some(format!(
                        "{}whole-file {}, preload {}",
                        exact.unwrap_or_default(),
                        times_x(case.num("whole_file_ratio_median")?),
                        times_x(case.num("preload_ratio_median")?)
                    ));
                    reductions.push(reduction);
                    if let Some(c) = row.closure {
                        closures.push(c);
                    }
                    programs += 1;
                    preload_learned += usize::from(case.boolean("preload_learned_exe")?);
                    // At the second setting, the mean row alone: the file has
                    // every program's figures.
                    if at.is_empty() {
                        rows.push(row);
                    }
                }
                if programs == 0 && !at.is_empty() {
                    // The second setting is optional (`--read-ahead-kb`).
                    continue;
                }
                if programs == 0 {
                    return Err(SummaryError::MissingCase {
                        path: file.path.clone(),
                        case: format!("any program{at}"),
                    });
                }
                let mean = reductions.iter().sum::<f64>() / reductions.len() as f64;
                let smallest = reductions.iter().copied().fold(f64::INFINITY, f64::min);
                rows.push(Row {
                    workload: workload.name(),
                    case: format!("mean of {programs}{at}"),
                    times: None,
                    result: format!("{} (smallest {})", change(mean, 1), change(smallest, 1)),
                    closure: (!closures.is_empty()).then(|| closures.iter().sum::<f64>() / closures.len() as f64),
                    limit: None,
                    peer: None,
                    run: file.run.clone(),
                });
                if at.is_empty() {
                    notes.push(match preload_learned {
                        0 => format!(
                            "launch: `preload` learned none of the {programs} programs in its training \
                             (`preload_learned_exe`): its column is the launch with preload's daemon \
                             running, not a trained preload."
                        ),
                        n if n < programs => format!(
                            "launch: `preload` learned {n} of the {programs} programs in its training \
                             (`preload_learned_exe`); for the others its column is the launch with \
                             preload's daemon running, not a trained preload."
                        ),
                        _ => format!("launch: `preload` learned all {programs} programs in its training."),
                    });
                }
            }
        }
        Workload::SqliteScan => {
            for name in ["scan-100", "scan-1000", "scan-10000", "point", "index-1000", "large-1000", "fresh-index-10"] {
                let case = file.case(name)?;
                rows.push(case.ab_row(workload, " (`.load`)")?);
                if name == "index-1000"
                    && let Ok(fresh) = file.case("fresh-index-1000")
                    && let Some(ratio) = fresh.opt_num("daemon_ratio_median")
                {
                    // A process that runs one query, beside the daemon as
                    // installed, whose first query of the database it is.
                    rows.push(fresh.ab_row_with(
                        workload,
                        "fresh-index-1000, beside the daemon".into(),
                        fresh.list_median("daemon_s")?,
                        ratio,
                        "",
                    )?);
                }
                if name == "scan-1000" || name == "index-1000" {
                    rows.push(case.ab_row_with(
                        workload,
                        format!("{name}, no change (`run`)"),
                        case.list_median("nochange_s")?,
                        case.num("nochange_ratio_median")?,
                        "",
                    )?);
                }
            }
        }
        Workload::LmdbScan => {
            for name in ["scan-10", "scan-1000", "scan-1000@ra128"] {
                let case = file.case(name)?;
                let mut row = case.ab_row(workload, "")?;
                row.peer = Some(format!("`MDB_NORDAHEAD` {}", times_x(case.num("nordahead_ratio_median")?)));
                rows.push(row);
            }
        }
        Workload::RocksDb => {
            for name in ["long-scan", "ycsb-e", "ycsb-c"] {
                let case = file.case(name)?;
                let fraction = case.num("time_fraction_of_baseline")?;
                let mut row = case.ab_row(workload, &format!(", {fraction:.2} of the time"))?;
                if name == "ycsb-c" {
                    // Point gets: nothing to prefetch, the bar is "never slower".
                    row.closure = None;
                }
                row.peer = Some(format!("readahead off {}", times_x(case.num("off_ratio_median")?)));
                rows.push(row);
            }
        }
        Workload::LlmLoad => {
            for name in ["2GiB-mmap", "2GiB-no-mmap", "4GiB-mmap", "4GiB-no-mmap"] {
                let case = file.case(name)?;
                let mut row = case.ab_row(workload, "")?;
                row.peer = Some(format!("{} {}", case.string("peer")?, times_x(case.num("peer_ratio_median")?)));
                // Closure against the ideal pass (the model made resident
                // just before, on the same cold memory), where it was run.
                if let Some(ideal) = case.opt_num("ideal_median_s") {
                    row.closure = closure(case.baseline()?, case.treatment()?, ideal);
                    row.limit = Some(format!("ideal {}", secs(ideal)));
                }
                rows.push(row);
            }
        }
        Workload::ModelLoad => {
            // The query touching one column of half the row groups has
            // little to gain (its ideal is ~1.2x): in the file, not here.
            for case in file.cases()?.into_iter().filter(|c| !c.name.starts_with("duckdb parquet range")) {
                let mut row = case.ab_row(workload, "")?;
                row.peer = Some(format!(
                    "vLLM-style {}, oracle {}",
                    times_x(case.num("peer_ratio_median")?),
                    times_x(case.num("oracle_ratio_median")?)
                ));
                let ideal = case.num("ideal_median_s")?;
                row.closure = closure(case.baseline()?, case.treatment()?, ideal);
                row.limit = Some(format!("ideal {}", secs(ideal)));
                rows.push(row);
            }
        }
        Workload::AccessPatterns => {
            // The treatment is the executor fed by an oracle that knows the
            // upcoming offsets: the mechanism's reach, not a policy's.
            for name in ["run-1", "run-16@ra128", "sequential@ra128"] {
                rows.push(file.case(name)?.ab_row(workload, " (oracle policy)")?);
            }
        }
        Workload::ShuffleRead => {
            for name in ["pause-400ms", "pause-20ms"] {
                let case = file.case(name)?;
                let total = case.num("stream_total_change_pct")?;
                let mut row = case.ab_row(workload, &format!(", total {}", signed_pct(total)))?;
                row.case = format!("{name}, stream");
                row.peer = Some(format!("Riffle's window {}", times_x(case.num("riffle_ratio_median")?)));
                rows.push(row);
                if name == "pause-400ms" {
                    let total = case.num("readplan_total_change_pct")?;
                    rows.push(case.ab_row_with(
                        workload,
                        format!("{name}, readplan"),
                        case.list_median("readplan_s")?,
                        case.num("readplan_ratio_median")?,
                        &format!(", total {}", signed_pct(total)),
                    )?);
                }
            }
        }
        Workload::SeqRead => {
            for name in ["seq-64k@ra128", "seq-64k@ra8192"] {
                let case = file.case(name)?;
                let stream = case.num("stream_pct_of_device")?;
                let plain = case.num("baseline_pct_of_device")?;
                let mut row =
                    case.ab_row(workload, &format!(", {stream:.0} % of the device (baseline {plain:.0} %)"))?;
                row.case = format!("{name}, stream");
                rows.push(row);
            }
        }
        Workload::LargeRead => {
            for name in ["read-1MiB", "read-128MiB"] {
                let case = file.case(name)?;
                let over = case.num("treatment_over_odirect")?;
                rows.push(case.ab_row(workload, &format!(", {over:.2}× of O_DIRECT"))?);
            }
        }
        Workload::NoStructure => {
            for name in ["random-4k", "jumpy-scan"] {
                let case = file.case(name)?;
                let learned = case.num("learned_ratio_median")?;
                let mut row = case.ab_row(workload, &format!(" stream, {} learned", times_x(learned)))?;
                // Nothing to predict: the bar is "never slower", not closure.
                row.closure = None;
                rows.push(row);
            }
        }
        Workload::ControlPath => {
            for name in [
                "executor ns/page skipped (64-page ranges)",
                "executor ns/page skipped (1-page ranges, scattered)",
                "runtime dispatch (M events/s)",
                "eBPF events into the runtime (2 readers)",
                "hints/s through the socket (client buffering)",
                "hints/s through the socket (one per datagram)",
            ] {
                rows.push(file.case(name)?.value_row(workload)?);
            }
        }
        Workload::LaunchDaemon => {
            for case in file.cases()? {
                let reduction = case.num("reduction_pct")?;
                rows.push(case.ab_row(workload, &format!(", {}", change(reduction, 0)))?);
            }
        }
        Workload::DaemonCost => {
            for name in ["idle daemon CPU", "idle daemon wake-ups", "daemon resident memory"] {
                rows.push(file.case(name)?.value_row(workload)?);
            }
            for (prefix, label) in
                [("cold ", "slowest cold launch beside it"), ("warm ", "slowest warm launch beside it")]
            {
                let mut slowest: Option<(f64, Case<'_>)> = None;
                for case in
                    file.cases()?.into_iter().filter(|c| c.name.starts_with(prefix) && !c.name.starts_with(RUN_COST))
                {
                    let ratio = case.num("ratio_median")?;
                    if slowest.as_ref().is_none_or(|(r, _)| ratio < *r) {
                        slowest = Some((ratio, case));
                    }
                }
                let Some((ratio, case)) = slowest else {
                    return Err(SummaryError::MissingCase { path: file.path.clone(), case: format!("{prefix}…") });
                };
                rows.push(Row {
                    workload: workload.name(),
                    case: format!("{label}: {}", case.name),
                    times: Some(format!("{} → {}", secs(case.baseline()?), secs(case.treatment()?))),
                    result: format!("{}{}", times_x(ratio), case.bar_suffix()),
                    closure: None,
                    limit: None,
                    peer: None,
                    run: file.run.clone(),
                });
            }
            // The daemon's CPU over a model load (older results have none).
            if let Some(model) = file.cases()?.into_iter().find(|c| c.name.starts_with(MODEL_LOAD)) {
                let other = model.num("daemon_other_cpu_ms_median")?;
                rows.push(Row {
                    workload: workload.name(),
                    case: "its CPU over a cold 2 GiB model load, outside its executor; the fill".into(),
                    times: Some(format!("{} → {}", secs(model.baseline()?), secs(model.treatment()?))),
                    result: format!(
                        "{other:.0} ms (bar <= {MODEL_CPU_BAR_MS} ms: {}); fill {:.0} ms; the load {}",
                        if other <= MODEL_CPU_BAR_MS { "met" } else { "**not met**" },
                        model.num("daemon_fill_cpu_ms_median")?,
                        times_x(model.num("ratio_median")?),
                    ),
                    closure: None,
                    limit: None,
                    peer: None,
                    run: file.run.clone(),
                });
            }
            // `predictio run`'s own cost (older results have no such case).
            let cost = |case: &Case<'_>| case.num("overhead_ms_median");
            let runs: Vec<Case<'_>> = file.cases()?.into_iter().filter(|c| c.name.starts_with(RUN_COST)).collect();
            if let [alone, beside] = runs.as_slice() {
                let met = cost(alone)? <= RUN_COST_BAR_MS && cost(beside)? <= RUN_COST_BAR_MS;
                rows.push(Row {
                    workload: workload.name(),
                    case: "`predictio run -q -- true`, cold: its own cost without a daemon, beside one".into(),
                    times: None,
                    result: format!(
                        "{:.1} ms, {:.1} ms (bar <= {RUN_COST_BAR_MS} ms: {})",
                        cost(alone)?,
                        cost(beside)?,
                        if met { "met" } else { "**not met**" }
                    ),
                    closure: None,
                    limit: None,
                    peer: None,
                    run: file.run.clone(),
                });
            }
        }
        Workload::Backends => {}
    }
    Ok(rows)
}

/// The name of daemon-cost's model-load case begins so, and its bar (as the
/// workload's), ms of the daemon's CPU outside its executor.
const MODEL_LOAD: &str = "model load:";
const MODEL_CPU_BAR_MS: f64 = 100.0;

/// The names of daemon-cost's `predictio run -- true` cases begin so.
const RUN_COST: &str = "cold predictio run -- true";
/// Its bar (as the workload's `RUN_BAR_MS`), ms over a plain `true`.
const RUN_COST_BAR_MS: f64 = 10.0;

/// Closure in percent, or `None` where the baseline is not above the limit.
fn closure(baseline: f64, treatment: f64, limit: f64) -> Option<f64> {
    (baseline > limit).then(|| 100.0 * (baseline - treatment) / (baseline - limit))
}

/// Seconds as `2.54 s`, `153 ms` or `8.5 ms`.
fn secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 0.01 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{:.1} ms", s * 1000.0)
    }
}

fn times_x(ratio: f64) -> String {
    format!("{ratio:.2}×")
}

fn pct0(p: f64) -> String {
    if p < 0.0 { format!("−{:.0} %", -p) } else { format!("{p:.0} %") }
}

/// A reduction in percent as a signed change: 66.1 → `−66 %`, −3 → `+3 %`.
fn change(reduction: f64, decimals: usize) -> String {
    if reduction >= 0.0 { format!("−{reduction:.decimals$} %") } else { format!("+{:.decimals$} %", -reduction) }
}

fn signed_pct(p: f64) -> String {
    if p < 0.0 { format!("−{:.1} %", -p) } else { format!("+{p:.1} %") }
}

/// About three significant digits.
fn sig3(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch result of two programs at one setting and one at 128, with
    /// the fields the table reads.
    fn launch_fixture() -> String {
        let case = |name: &str, b: f64, t: f64, warm: f64, learned: bool| {
            format!(
                r#"{{"name": "{name}", "ratio_median": {r}, "baseline": {{"min": {b}, "median": {b}, "max": {b}}},
                 "treatment": {{"min": {t}, "median": {t}, "max": {t}}}, "warm_s": {warm}, "limit_s": {warm},
                 "reduction_pct": {red}, "whole_file_ratio_median": 1.25, "preload_ratio_median": 0.99,
                 "preload_learned_exe": {learned}}}"#,
                r = b / t,
                red = 100.0 * (b - t) / b
            )
        };
        format!(
            r#"{{"workload": "launch", "created": "2026-12-05T10:34:07Z", "git_revision": "0123456789abcdef",
                "cases": [{}, {}, {}]}}"#,
            case("clang -c small.c", 0.200, 0.050, 0.020, false),
            case("gdb --batch", 0.100, 0.060, 0.040, false),
            case("gdb --batch @ra128", 0.100, 0.070, 0.040, false),
        )
    }

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write fixture");
        }
        dir
    }

    #[test]
    fn renders_launch_rows_means_and_the_preload_note() {
        let dir = dir_with(&[("launch.json", &launch_fixture())]);
        let table = render_workloads(dir.path(), &[Workload::Launch]).expect("renders");
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| launch ")).collect();
        assert_eq!(
            rows,
            [
                "| launch | clang -c small.c | 200 ms → 50 ms | 4.00×, −75 % | 83 % | warm 20 ms | whole-file 1.25×, preload 0.99× | 2026-12-05 `0123456` |",
                "| launch | gdb --batch | 100 ms → 60 ms | 1.67×, −40 % | 67 % | warm 40 ms | whole-file 1.25×, preload 0.99× | 2026-12-05 `0123456` |",
                "| launch | mean of 2 | — | −57.5 % (smallest −40.0 %) | 75 % | — | — | 2026-12-05 `0123456` |",
                "| launch | mean of 1 @ra128 | — | −30.0 % (smallest −30.0 %) | 50 % | — | — | 2026-12-05 `0123456` |",
            ]
        );
        assert!(table.contains("`preload` learned none of the 2 programs in its training"), "{table}");
    }

    #[test]
    fn a_missing_field_names_file_case_and_field() {
        let broken = launch_fixture().replacen("\"reduction_pct\"", "\"reduction\"", 1);
        let dir = dir_with(&[("launch.json", &broken)]);
        let err = render_workloads(dir.path(), &[Workload::Launch]).expect_err("must fail");
        match &err {
            SummaryError::MissingField { case, field, .. } => {
                assert_eq!(case, "clang -c small.c");
                assert_eq!(field, "reduction_pct");
            }
            other => panic!("wrong error: {other}"),
        }
        assert!(err.to_string().contains("launch.json"), "{err}");
    }

    #[test]
    fn a_missing_case_and_a_wrong_workload_are_errors() {
        let dir = dir_with(&[
            ("sqlite-scan.json", r#"{"workload": "sqlite-scan", "created": "2026-12-02T03:22:40Z", "cases": []}"#),
            ("lmdb-scan.json", r#"{"workload": "sqlite-scan", "created": "2026-12-02T03:22:40Z", "cases": []}"#),
        ]);
        let err = render_workloads(dir.path(), &[Workload::SqliteScan]).expect_err("no cases");
        assert!(matches!(&err, SummaryError::MissingCase { case, .. } if case == "scan-100"), "{err}");
        let err = render_workloads(dir.path(), &[Workload::LmdbScan]).expect_err("wrong workload");
        assert!(matches!(err, SummaryError::WrongWorkload { .. }), "{err}");
        let err = render_workloads(dir.path(), &[Workload::RocksDb]).expect_err("no file");
        assert!(matches!(err, SummaryError::Read { .. }), "{err}");
    }

    #[test]
    fn value_rows_carry_unit_and_bar() {
        let names = [
            "executor ns/page skipped (64-page ranges)",
            "executor ns/page skipped (1-page ranges, scattered)",
            "runtime dispatch (M events/s)",
            "eBPF events into the runtime (2 readers)",
            "hints/s through the socket (client buffering)",
            "hints/s through the socket (one per datagram)",
        ];
        let cases: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    r#"{{"name": "{n}", "value": {v}, "unit": "M hints/s", "bar": ">= 1", "meets_bar": {m}}}"#,
                    v = if i == 5 { 0.1416 } else { 158.66 },
                    m = i != 5
                )
            })
            .collect();
        let json = format!(
            r#"{{"workload": "control-path", "created": "2026-12-01T01:49:39Z", "cases": [{}]}}"#,
            cases.join(",")
        );
        let dir = dir_with(&[("control-path.json", &json)]);
        let table = render_workloads(dir.path(), &[Workload::ControlPath]).expect("renders");
        assert!(
            table.contains(
                "| control-path | hints/s through the socket (one per datagram) | — | 0.142 M hints/s (bar >= 1: **not met**) | — | — | — | 2026-12-01 |"
            ),
            "{table}"
        );
        assert!(table.contains("| 159 M hints/s (bar >= 1: met) |"), "{table}");
    }

    #[test]
    fn the_block_check_names_the_first_differing_line() {
        let generated = "a\nb\nc\n";
        let readme = format!("# title\n\n{BEGIN_MARKER}\na\nb\nc\n{END_MARKER}\nrest\n");
        assert_eq!(check_block(&readme, generated), Ok(()));

        let changed = readme.replace("\nb\n", "\nB\n");
        assert_eq!(
            check_block(&changed, generated),
            Err(BlockError::Differs { line: 5, expected: "b".into(), found: "B".into() })
        );
        let short = readme.replace("c\n", "");
        assert_eq!(
            check_block(&short, generated),
            Err(BlockError::Differs { line: 6, expected: "c".into(), found: "<end of block>".into() })
        );
        assert_eq!(check_block("no markers", generated), Err(BlockError::NoBegin));
        assert_eq!(check_block(&format!("{BEGIN_MARKER}\na\n"), generated), Err(BlockError::NoEnd));
    }

    #[test]
    fn a_readme_holding_the_render_passes_the_block_check() {
        let dir = dir_with(&[("launch.json", &launch_fixture())]);
        let table = render_workloads(dir.path(), &[Workload::Launch]).expect("renders");
        let readme = dir.path().join("README.md");
        std::fs::write(&readme, format!("x\n{BEGIN_MARKER}\n{table}{END_MARKER}\n")).expect("write");
        let found = std::fs::read_to_string(&readme).expect("read");
        assert_eq!(check_block(&found, &table), Ok(()));
    }

    fn repository() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// Every committed result file has the fields the table reads.
    #[test]
    fn the_committed_results_render() {
        let table = render(&repository().join("docs/results")).unwrap_or_else(|err| panic!("{err}"));
        println!("{table}");
        for workload in HEADLINE_WORKLOADS {
            assert!(table.contains(&format!("| {} |", workload.name())), "no row of {workload}");
        }
    }

    /// The README's numbers are the committed results' (regenerate the block
    /// with `predictio-bench summary` after committing a result file).
    #[test]
    fn the_readme_table_is_the_render_of_the_committed_results() {
        let root = repository();
        if let Err(err) = check_readme(&root.join("README.md"), &root.join("docs/results")) {
            panic!("{err}");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(secs(2.5369), "2.54 s");
        assert_eq!(secs(0.1528), "153 ms");
        assert_eq!(secs(0.0085), "8.5 ms");
        assert_eq!(closure(0.2, 0.05, 0.02).map(|c| c.round()), Some(83.0));
        assert_eq!(closure(0.01, 0.02, 0.02), None);
        assert_eq!(pct0(-12.4), "−12 %");
        assert_eq!(sig3(0.14159), "0.142");
    }
}
