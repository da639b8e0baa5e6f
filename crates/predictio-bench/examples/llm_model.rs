//! Writes (or finds cached) the `llm-load` bench's generated llama model of
//! about GIB GiB under DIR and prints its path:
//! `cargo run --release -p predictio-bench --example llm_model -- DIR GIB`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: llm_model DIR GIB")?;
    let gib: u64 = args.next().ok_or("usage: llm_model DIR GIB")?.parse()?;
    let (path, shape) = predictio_bench::llm_model::ensure(std::path::Path::new(&dir), gib)?;
    println!("{}\t{shape:?}", path.display());
    Ok(())
}
