//! `predictio model FILE [--order compute|llama-cpp-read] [--tensors] [--json]`
//! (a Parquet file: its row groups and columns)

use std::path::PathBuf;

use anyhow::{Context, Result};
use predictio::model::{LayerSpan, LoadOrder, ModelLayout, PlanRange, TensorInfo, TensorRole};
use predictio::parquet::{ParquetError, ParquetLayout};

use crate::units::{human, printable};

/// Whose load order the prefetch plan follows.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum Order {
    /// Compute order (what an mmap'd loader faults in): embeddings, layers,
    /// then output norm and output.
    #[default]
    Compute,
    /// llama.cpp without mmap: embeddings, output norm and output, then the
    /// layers.
    LlamaCppRead,
}

impl From<Order> for LoadOrder {
    fn from(order: Order) -> Self {
        match order {
            Order::Compute => LoadOrder::Compute,
            Order::LlamaCppRead => LoadOrder::LlamaCppRead,
        }
    }
}

/// Arguments of `model`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A GGUF or safetensors model file, or a Parquet file (its column
    /// chunks, which the `columns` policy fetches ahead of a query).
    file: PathBuf,
    /// Whose load order the plan follows.
    #[arg(long, value_enum, default_value_t = Order::Compute)]
    order: Order,
    /// Also list every tensor (name, type, shape, byte range), or every
    /// Parquet column chunk.
    #[arg(long)]
    tensors: bool,
    /// Print the layout as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Output<'a> {
    file: String,
    format: String,
    file_len: u64,
    data_offset: u64,
    alignment: u64,
    tensor_count: usize,
    tensor_bytes: u64,
    layer_count: u32,
    metadata: &'a std::collections::BTreeMap<String, predictio::model::MetaValue>,
    groups: Vec<LayerSpan>,
    order: LoadOrder,
    plan: Vec<PlanRange>,
    plan_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tensors: Option<Vec<&'a TensorInfo>>,
}

fn role_name(role: TensorRole) -> String {
    match role {
        TensorRole::Embedding => "embedding".into(),
        TensorRole::Prelude => "prelude".into(),
        TensorRole::Layer(n) => format!("layer {n}"),
        TensorRole::Output => "output".into(),
    }
}

/// Runs `model`.
pub fn run(args: Args) -> Result<()> {
    let file = super::open_file(&args.file)?;
    match ParquetLayout::read(&file) {
        Ok(layout) => return show_parquet(&args, &layout),
        Err(ParquetError::NotParquet) => {}
        Err(err) => return Err(err).with_context(|| format!("reading the Parquet footer of {}", args.file.display())),
    }
    let layout = ModelLayout::read(&file).with_context(|| format!("reading the header of {}", args.file.display()))?;
    let order = LoadOrder::from(args.order);
    let plan = layout.plan(order);
    let plan_bytes: u64 = plan.iter().map(|r| r.len).sum();
    let out = Output {
        file: args.file.display().to_string(),
        format: layout.format.to_string(),
        file_len: layout.file_len,
        data_offset: layout.data_offset,
        alignment: layout.alignment,
        tensor_count: layout.tensors.len(),
        tensor_bytes: layout.tensor_bytes(),
        layer_count: layout.layer_count(),
        metadata: &layout.metadata,
        groups: layout.layers(),
        order,
        plan,
        plan_bytes,
        tensors: args.tensors.then(|| layout.load_order_for(order)),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    println!(
        "{}: {}, {} tensors, {} of tensor data ({} file), data at byte {}, alignment {}",
        out.file,
        out.format,
        out.tensor_count,
        human(out.tensor_bytes),
        human(out.file_len),
        out.data_offset,
        out.alignment
    );
    let meta = |key: &str| layout.metadata.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    if let Some(arch) = meta("general.architecture") {
        let name = meta("general.name").map(|n| format!(" ({})", printable(&n))).unwrap_or_default();
        println!("architecture {}{name}", printable(&arch));
    }
    println!("{} layers", out.layer_count);
    println!();
    println!("{:<12} {:>8} {:>12}  byte ranges", "group", "tensors", "bytes");
    for g in &out.groups {
        let ranges: Vec<String> = g.ranges.iter().take(4).map(|(a, b)| format!("{a}..{b}")).collect();
        let more = if g.ranges.len() > 4 { format!(" (+{} more)", g.ranges.len() - 4) } else { String::new() };
        println!("{:<12} {:>8} {:>12}  {}{more}", role_name(g.role), g.tensors, human(g.bytes), ranges.join(", "));
    }
    println!();
    println!(
        "prefetch plan ({} order): {} range{}, {} ({:.1}% of the file)",
        match args.order {
            Order::Compute => "compute",
            Order::LlamaCppRead => "llama.cpp read",
        },
        out.plan.len(),
        if out.plan.len() == 1 { "" } else { "s" },
        human(out.plan_bytes),
        out.plan_bytes as f64 * 100.0 / out.file_len.max(1) as f64
    );
    println!("{:>4} {:>14} {:>14} {:>12}  first", "#", "offset", "end", "length");
    for (i, r) in out.plan.iter().enumerate() {
        println!("{:>4} {:>14} {:>14} {:>12}  {}", i, r.offset, r.end(), human(r.len), role_name(r.role));
    }
    if let Some(tensors) = &out.tensors {
        println!();
        println!("{:<48} {:>8} {:>24} {:>14} {:>12}", "tensor (load order)", "type", "shape", "offset", "length");
        for t in tensors {
            let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
            println!(
                "{:<48} {:>8} {:>24} {:>14} {:>12}",
                printable(&t.name),
                printable(&t.dtype),
                shape.join("x"),
                t.offset,
                human(t.len)
            );
        }
    }
    Ok(())
}

/// Prints a Parquet file's layout: bytes per column over its row groups,
/// and with `--tensors` every column chunk.
fn show_parquet(args: &Args, layout: &ParquetLayout) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(layout)?);
        return Ok(());
    }
    println!(
        "{}: Parquet, {} rows in {} row groups of {} columns, {} of column data ({} file), footer at byte {}",
        args.file.display(),
        layout.rows,
        layout.row_groups,
        layout.columns,
        human(layout.chunk_bytes()),
        human(layout.file_len),
        layout.footer_offset
    );
    let mut per_column = vec![(0u64, 0u32); layout.columns as usize];
    for chunk in &layout.chunks {
        if let Some((bytes, chunks)) = per_column.get_mut(chunk.column as usize) {
            *bytes += chunk.len;
            *chunks += 1;
        }
    }
    println!();
    println!("{:>6} {:>8} {:>12}", "column", "chunks", "bytes");
    for (column, (bytes, chunks)) in per_column.iter().enumerate() {
        println!("{column:>6} {chunks:>8} {:>12}", human(*bytes));
    }
    if args.tensors {
        println!();
        println!("{:>9} {:>6} {:>14} {:>12}", "row group", "column", "offset", "length");
        for c in &layout.chunks {
            println!("{:>9} {:>6} {:>14} {:>12}", c.row_group, c.column, c.offset, human(c.len));
        }
    }
    Ok(())
}
