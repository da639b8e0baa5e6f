// Loads a GGUF model with llama.cpp (through node-llama-cpp's prebuilt
// binaries, CPU only), then evaluates a fixed prompt and greedily generates a
// few tokens, so that every weight has been touched. Prints one JSON line:
// load time, time to first token (load + context + first token), the token
// ids (the answer the bench compares with and without prefetching).
//
//   node scripts/llama-load.mjs MODEL.gguf [--no-mmap] [--mlock] [--direct-io] [--tokens N]
//
// NODE_LLAMA_CPP_DIR: where scripts/llama.sh installed node-llama-cpp
// (default /var/tmp/predictio-llama/node). Nothing is downloaded or built:
// build "never", and NODE_LLAMA_CPP_SKIP_DOWNLOAD is set.
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = "true";
const started = performance.now();
const args = process.argv.slice(2);
const model = args.find((a) => !a.startsWith("--"));
if (!model) {
    console.error("usage: node scripts/llama-load.mjs MODEL.gguf [--no-mmap] [--mlock] [--direct-io] [--tokens N]");
    process.exit(2);
}
const flag = (name) => args.includes(name);
const tokensAt = args.indexOf("--tokens");
const generate = tokensAt >= 0 ? Number(args[tokensAt + 1]) : 4;

const dir = process.env.NODE_LLAMA_CPP_DIR ?? "/var/tmp/predictio-llama/node";
const require = createRequire(path.join(dir, "package.json"));
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const t0 = performance.now();
const loaded = await llama.loadModel({
    modelPath: path.resolve(model),
    gpuLayers: 0,
    useMmap: !flag("--no-mmap"),
    useMlock: flag("--mlock"),
    useDirectIo: flag("--direct-io"),
});
const t1 = performance.now();
const context = await loaded.createContext({ contextSize: 256, batchSize: 64, threads: 2 });
const tContext = performance.now();
const sequence = context.getSequence();
// A fixed prompt as token ids (<s> then four plain pieces): no tokenizer
// behaviour is involved in the answer.
const prompt = [1, 300, 1000, 5000, 20000];
const tokens = [];
let firstTokenMs = null;
for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
    if (firstTokenMs === null) firstTokenMs = performance.now() - t0;
    tokens.push(token);
    if (tokens.length >= generate) break;
}
const t2 = performance.now();
console.log(
    JSON.stringify({
        load_s: (t1 - t0) / 1000,
        first_token_s: firstTokenMs / 1000,
        context_s: (tContext - t1) / 1000,
        total_s: (t2 - t0) / 1000,
        startup_s: (t0 - started) / 1000,
        mmap: loaded.useMmap,
        tokens,
    }),
);
await context.dispose();
await loaded.dispose();
await llama.dispose();
