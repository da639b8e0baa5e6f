//! B-tree page parsers against real SQLite files, and a bounded-time fuzz run
//! over both parsers.
//!
//! The real-file tests build databases with the `sqlite3` shell (Debian
//! package `sqlite3`): YCSB-style keys inserted in random order, an
//! overflowing row, deleted rows (freelist pages), a second tree (the primary
//! key's index). Every tree is walked from its root through
//! `sqlite::parse_page` and compared with SQLite's own `dbstat` page counts;
//! then a simulated scan of the real tree drives the shared `btree` policy.
//! Without `sqlite3` they skip with a message; under `CI=true` a skip is a
//! failure.
//!
//! The fuzz run (seeded, stable toolchain, ~100k pages) feeds random and
//! mutated SQLite and LMDB pages, headers and meta pages to the parsers, and
//! what parses into a traversal and the policy: nothing may panic, and
//! whatever parses must satisfy the checks the parsers promise.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use predictio::btree::{DbPageLayout, Engine, InteriorKind, InteriorPage, PageError, Traversal, lmdb, sqlite};
use predictio::policies::btree::{BtreeConfig, BtreePolicy};
use predictio::policy::{FileTable, Policy, PolicyContext};
use predictio::testing::Rng;
use predictio::{Event, FileRef, PolicyId};

// ------------------------------------------------------------ real SQLite

/// Runs `sql` through the `sqlite3` shell on `db`; `None` when the shell is
/// missing (a failure under CI).
#[track_caller]
fn sqlite3(db: &Path, sql: &str) -> Option<String> {
    match Command::new("sqlite3").arg(db).arg(sql).output() {
        Ok(out) => {
            assert!(out.status.success(), "sqlite3 failed: {}", String::from_utf8_lossy(&out.stderr));
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Err(err) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("the sqlite3 shell is needed under CI (apt-get install sqlite3): {err}")
        }
        Err(err) => {
            eprintln!("skipping: needs the sqlite3 shell (apt-get install sqlite3): {err}");
            None
        }
    }
}

/// A YCSB-style database: `rows` keys `user%010d` with 400-byte values in
/// random order, one overflowing row, every seventh row deleted.
fn build_db(dir: &Path, page_size: u32, rows: u32) -> Option<PathBuf> {
    let db = dir.join(format!("ycsb-{page_size}.db"));
    let sql = format!(
        "PRAGMA page_size={page_size};
         CREATE TABLE usertable(key TEXT PRIMARY KEY, value BLOB);
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
           INSERT INTO usertable SELECT printf('user%010d', x), randomblob(400) FROM c ORDER BY random();
         INSERT INTO usertable VALUES ('zz-big', randomblob(20000));
         DELETE FROM usertable WHERE rowid % 7 = 0;"
    );
    sqlite3(&db, &sql)?;
    Some(db)
}

/// One page of a database image.
#[track_caller]
fn page(image: &[u8], page_size: u32, page_no: u64) -> &[u8] {
    let start = (page_no as usize - 1) * page_size as usize;
    &image[start..start + page_size as usize]
}

/// Walks the tree rooted at `root` in key order: the page reads a full
/// scan makes (each interior page before its children), and the number of
/// interior and leaf pages.
#[track_caller]
fn walk(image: &[u8], geometry: &sqlite::Geometry, root: u64, reads: &mut Vec<u64>) -> (usize, usize) {
    reads.push(root);
    match sqlite::parse_page(page(image, geometry.page_size, root), root as u32, geometry) {
        Ok(interior) => {
            let (mut interiors, mut leaves) = (1, 0);
            for &child in &interior.children {
                let (i, l) = walk(image, geometry, child, reads);
                interiors += i;
                leaves += l;
            }
            (interiors, leaves)
        }
        Err(PageError::Leaf) => (0, 1),
        Err(err) => panic!("page {root} of a valid tree: {err}"),
    }
}

#[test]
fn real_sqlite_trees_parse_as_sqlite_counts_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    for page_size in [4096u32, 1024, 65536] {
        let Some(db) = build_db(dir.path(), page_size, 12_000) else { return };
        let image = std::fs::read(&db).expect("read db");
        let header = sqlite::Header::parse(&image).expect("header");
        assert_eq!(header.page_size, page_size);
        assert_eq!(header.page_count.map(|n| n as usize * page_size as usize), Some(image.len()));
        let geometry = header.geometry();
        // SQLite's own count of interior and leaf pages per tree.
        let mut expected: HashMap<String, (usize, usize)> = HashMap::new();
        let stat = sqlite3(&db, "SELECT name, pagetype, count(*) FROM dbstat GROUP BY name, pagetype;")
            .expect("sqlite3 was there a moment ago");
        for line in stat.lines() {
            let fields: Vec<&str> = line.split('|').collect();
            let count: usize = fields[2].parse().expect("count");
            let entry = expected.entry(fields[0].to_string()).or_default();
            match fields[1] {
                "internal" => entry.0 = count,
                "leaf" => entry.1 = count,
                _ => {}
            }
        }
        let schema = sqlite3(&db, "SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0;").expect("sqlite3");
        let mut roots: Vec<(String, u64)> = vec![("sqlite_schema".to_string(), 1)];
        for line in schema.lines() {
            let (name, root) = line.split_once('|').expect("name|root");
            roots.push((name.to_string(), root.parse().expect("root page")));
        }
        let mut seen = HashSet::new();
        for (name, root) in &roots {
            let mut reads = Vec::new();
            let counts = walk(&image, &geometry, *root, &mut reads);
            assert_eq!(Some(&counts), expected.get(name), "{name} (page size {page_size})");
            for page_no in reads {
                assert!(seen.insert(page_no), "page {page_no} in two trees");
            }
        }
        // Every page of the file parses without a panic, into a known outcome.
        let mut outcomes: HashMap<&'static str, usize> = HashMap::new();
        for page_no in 1..=header.page_count.unwrap_or(0) {
            let outcome = match sqlite::parse_page(page(&image, page_size, u64::from(page_no)), page_no, &geometry) {
                Ok(_) => "interior",
                Err(err) => err.reason(),
            };
            *outcomes.entry(outcome).or_default() += 1;
        }
        let interiors: usize = expected.values().map(|c| c.0).sum();
        assert!(outcomes.get("interior").copied().unwrap_or(0) >= interiors, "{outcomes:?}");
        if page_size < 20_000 {
            let passed_over = outcomes.get("not_btree").copied().unwrap_or(0);
            assert!(passed_over >= 1, "the big row's overflow pages are passed over: {outcomes:?}");
        }
    }
}

#[test]
fn a_real_scan_drives_the_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(db) = build_db(dir.path(), 4096, 20_000) else { return };
    let image = std::fs::read(&db).expect("read db");
    let header = sqlite::Header::parse(&image).expect("header");
    let geometry = header.geometry();
    let root: u64 = sqlite3(&db, "SELECT rootpage FROM sqlite_schema WHERE name = 'usertable';")
        .expect("sqlite3")
        .trim()
        .parse()
        .expect("root page");
    let mut reads = Vec::new();
    let (_, leaves) = walk(&image, &geometry, root, &mut reads);
    assert!(leaves > 1000, "a tree of {leaves} leaves");

    let file = FileRef::open(&db).expect("open db");
    let mut files = FileTable::default();
    files.insert(file.clone());
    let layout = header.layout().expect("layout");
    let mut traversal = Traversal::new(file.id(), layout, 16);
    let mut policy = BtreePolicy::new(BtreeConfig::default());
    let tree: HashSet<u64> = reads.iter().copied().collect();
    let (mut requested, mut early, mut requests) = (HashSet::new(), 0, 0);
    let mut out = Vec::new();
    for &page_no in &reads {
        if requested.contains(&page_no) {
            early += 1;
        }
        let parsed = sqlite::parse_page(page(&image, 4096, page_no), page_no as u32, &geometry).ok();
        if let Some(event) = traversal.on_read(page_no, parsed) {
            policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
        }
        for request in out.drain(..) {
            requests += 1;
            for range in &request.ranges {
                let db_page = range.start + 1;
                assert!(tree.contains(&db_page), "requested page {db_page} is not in the tree");
                assert!(requested.insert(db_page), "page {db_page} requested twice");
            }
        }
    }
    // Demand reads: the root, the first interior, and the first two leaves
    // below each interior page (the descent that reveals its children).
    let interiors = reads.len() - leaves;
    assert!(early + 1 + 2 * interiors >= reads.len() - 2, "{early} of {} reads prefetched", reads.len());
    assert!(requested.len() <= reads.len(), "{} requested for {} reads", requested.len(), reads.len());
    assert!(requests < reads.len(), "{requests} requests");
}

// ------------------------------------------------------------------ fuzzing

/// A SQLite interior page with `children` (the last is the right-most).
fn sqlite_interior(page_size: usize, page_no: u32, kind: u8, children: &[u32]) -> Vec<u8> {
    let mut page = vec![0u8; page_size];
    let header = if page_no == 1 { sqlite::HEADER_SIZE } else { 0 };
    let (cells, right) = children.split_at(children.len() - 1);
    let mut content = page_size;
    for (i, child) in cells.iter().enumerate() {
        content -= 5;
        page[content..content + 4].copy_from_slice(&child.to_be_bytes());
        page[content + 4] = i as u8 & 0x7f;
        let at = header + 12 + 2 * i;
        page[at..at + 2].copy_from_slice(&(content as u16).to_be_bytes());
    }
    page[header] = kind;
    page[header + 3..header + 5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
    page[header + 5..header + 7].copy_from_slice(&((content % 65536) as u16).to_be_bytes());
    page[header + 8..header + 12].copy_from_slice(&right[0].to_be_bytes());
    if page_no == 1 {
        page[..16].copy_from_slice(sqlite::MAGIC);
        page[16..18].copy_from_slice(&(page_size as u16).to_be_bytes());
        page[18] = 1;
        page[19] = 1;
        page[21..24].copy_from_slice(&[64, 32, 32]);
        page[28..32].copy_from_slice(&1000u32.to_be_bytes());
    }
    page
}

/// An LMDB branch page with `children`.
fn lmdb_branch(page_size: usize, page_no: u64, children: &[u64]) -> Vec<u8> {
    let mut page = vec![0u8; page_size];
    page[..8].copy_from_slice(&page_no.to_le_bytes());
    page[10..12].copy_from_slice(&lmdb::P_BRANCH.to_le_bytes());
    let mut upper = page_size;
    for (i, &child) in children.iter().enumerate() {
        let key_len = if i == 0 { 0 } else { 10 };
        upper -= 8 + key_len;
        page[upper..upper + 2].copy_from_slice(&(child as u16).to_le_bytes());
        page[upper + 2..upper + 4].copy_from_slice(&((child >> 16) as u16).to_le_bytes());
        page[upper + 4..upper + 6].copy_from_slice(&((child >> 32) as u16).to_le_bytes());
        page[upper + 6..upper + 8].copy_from_slice(&(key_len as u16).to_le_bytes());
        let at = 16 + 2 * i;
        page[at..at + 2].copy_from_slice(&(upper as u16).to_le_bytes());
    }
    page[12..14].copy_from_slice(&((16 + 2 * children.len()) as u16).to_le_bytes());
    page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
    page
}

/// An LMDB meta page.
fn lmdb_meta(page_size: u32) -> Vec<u8> {
    let mut page = vec![0u8; page_size as usize];
    page[10..12].copy_from_slice(&lmdb::P_META.to_le_bytes());
    page[16..20].copy_from_slice(&lmdb::MAGIC.to_le_bytes());
    page[20..24].copy_from_slice(&lmdb::DATA_VERSION.to_le_bytes());
    page[40..44].copy_from_slice(&page_size.to_le_bytes());
    page[128..136].copy_from_slice(&3u64.to_le_bytes());
    page[136..144].copy_from_slice(&900u64.to_le_bytes());
    page
}

/// One mutation of a page: bit flips, byte stores, header and pointer
/// fields overwritten (both byte orders), splices, rarely a truncation.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if out.is_empty() {
            break;
        }
        match rng.below(7) {
            0 => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(out.len());
                out[i] = rng.next() as u8;
            }
            2 | 3 => {
                // A header field or a pointer-array entry: the first 128
                // bytes (and page 1's b-tree header at 100) hold them.
                let i = rng.below(out.len().min(140));
                let value: u16 = match rng.below(4) {
                    0 => u16::MAX,
                    1 => rng.next() as u16,
                    2 => (out.len() as u16).wrapping_sub(rng.below(16) as u16),
                    _ => rng.below(64) as u16,
                };
                let bytes = if rng.below(2) == 0 { value.to_be_bytes() } else { value.to_le_bytes() };
                for (k, b) in bytes.iter().enumerate() {
                    if let Some(slot) = out.get_mut(i + k) {
                        *slot = *b;
                    }
                }
            }
            4 => {
                // A child page number anywhere (cells live at the end).
                let i = out.len() - 1 - rng.below(out.len().min(400));
                let value = match rng.below(3) {
                    0 => 0u32,
                    1 => u32::MAX,
                    _ => rng.next() as u32,
                };
                for (k, b) in value.to_be_bytes().iter().enumerate() {
                    if let Some(slot) = out.get_mut(i + k) {
                        *slot = *b;
                    }
                }
            }
            5 => {
                let i = rng.below(out.len());
                let j = rng.below(out.len());
                let n = rng.below(64).min(out.len() - i.max(j));
                out.copy_within(j..j + n, i);
            }
            _ => {
                if rng.below(8) == 0 {
                    let cut = rng.below(out.len());
                    out.truncate(cut);
                }
            }
        }
    }
    out
}

/// What every successful parse promises.
#[track_caller]
fn check_interior(page: &InteriorPage, page_no: u64, last: Option<u64>, engine: Engine) {
    assert!(!page.children.is_empty());
    for &child in &page.children {
        assert!(child >= 2 && child != page_no, "child {child} of page {page_no}");
        assert!(last.is_none_or(|last| child <= last), "child {child} beyond {last:?}");
    }
    let expected_kind = match engine {
        Engine::Sqlite => matches!(page.kind, InteriorKind::SqliteTable | InteriorKind::SqliteIndex),
        Engine::Lmdb => page.kind == InteriorKind::LmdbBranch,
    };
    assert!(expected_kind);
}

#[test]
fn fuzz_parsers_bounded() {
    let mut rng = Rng(0xB7EE_F022_5EED);
    let mut sqlite_seeds: Vec<(Vec<u8>, u32)> = vec![
        (sqlite_interior(4096, 7, sqlite::INTERIOR_TABLE, &[10, 30, 20, 99]), 7),
        (sqlite_interior(4096, 1, sqlite::INTERIOR_TABLE, &[2, 3, 4]), 1),
        (sqlite_interior(1024, 9, sqlite::INTERIOR_INDEX, &(2..120).collect::<Vec<_>>()), 9),
        (sqlite_interior(65536, 5, sqlite::INTERIOR_TABLE, &(100..900).collect::<Vec<_>>()), 5),
    ];
    // Real pages too, when the shell is here (no CI failure from the fuzz
    // itself: the real-file tests above already require it there).
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("seed.db");
    let built = Command::new("sqlite3")
        .arg(&db)
        .arg(
            "PRAGMA page_size=4096; CREATE TABLE t(k TEXT PRIMARY KEY, v BLOB);
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000)
               INSERT INTO t SELECT printf('user%010d', x), randomblob(400) FROM c ORDER BY random();",
        )
        .status()
        .is_ok_and(|s| s.success());
    if built {
        let image = std::fs::read(&db).expect("read seed db");
        for (i, chunk) in image.chunks_exact(4096).enumerate().take(64) {
            sqlite_seeds.push((chunk.to_vec(), i as u32 + 1));
        }
    }
    let lmdb_seeds: Vec<(Vec<u8>, u64)> = vec![
        (lmdb_branch(4096, 9, &[20, 3, 7000, 15]), 9),
        (lmdb_branch(4096, 40, &(100..300).collect::<Vec<_>>()), 40),
        (lmdb_branch(16384, 3, &[0x1234_5678_9abc, 5]), 3),
        (lmdb_meta(4096), 0),
    ];
    let sqlite_geometries = [
        sqlite::Geometry::new(4096, 0, Some(1000)).expect("geometry"),
        sqlite::Geometry::new(4096, 0, None).expect("geometry"),
        sqlite::Geometry::new(1024, 0, None).expect("geometry"),
        sqlite::Geometry::new(65536, 0, Some(5000)).expect("geometry"),
        sqlite::Geometry::new(4096, 32, None).expect("geometry"),
    ];
    let lmdb_geometries = [
        lmdb::Geometry::new(4096, Some(10_000)).expect("geometry"),
        lmdb::Geometry::new(4096, None).expect("geometry"),
        lmdb::Geometry::new(16384, None).expect("geometry"),
    ];

    // What parses goes on through a traversal into the policy.
    let file = FileRef::open("/proc/self/exe").expect("open /proc/self/exe");
    let mut files = FileTable::default();
    files.insert(file.clone());
    let layout = DbPageLayout::new(Engine::Sqlite, 4096).expect("layout");
    let mut traversal = Traversal::new(file.id(), layout, 8);
    let mut policy = BtreePolicy::default();
    // What one enter may request: the window and a next sibling, plus, once
    // per parent above the lowest level, its children within the file's
    // whole-level budget.
    let max_ranges = policy.config().max_window as usize + 1 + policy.config().upper_pages as usize;
    let mut out = Vec::new();

    let iterations: u64 =
        std::env::var("PREDICTIO_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let started = std::time::Instant::now();
    let mut parsed = 0u64;
    let mut reasons: HashMap<&'static str, u64> = HashMap::new();
    for i in 0..iterations {
        let sqlite_side = i % 2 == 0;
        let (input, own) = if i % 16 < 2 {
            // Pure noise of a page's length, sometimes with a valid type byte.
            let size = [1024usize, 4096, 16384, 65536][rng.below(4)];
            let mut noise: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
            if rng.below(2) == 0 {
                noise[0] = [sqlite::INTERIOR_TABLE, sqlite::INTERIOR_INDEX][rng.below(2)];
                noise[10] = lmdb::P_BRANCH as u8;
                noise[11] = 0;
            }
            (noise, rng.below(2000) as u64)
        } else if sqlite_side {
            let (seed, own) = &sqlite_seeds[rng.below(sqlite_seeds.len())];
            (mutate(&mut rng, seed), u64::from(*own))
        } else {
            let (seed, own) = &lmdb_seeds[rng.below(lmdb_seeds.len())];
            (mutate(&mut rng, seed), *own)
        };
        // Mostly the page's own number, sometimes another.
        let page_no = if rng.below(8) == 0 { rng.below(3000) as u64 } else { own };
        if sqlite_side {
            // Mostly a geometry of the input's size, so that checks past the length are reached.
            let fitting: Vec<_> = sqlite_geometries.iter().filter(|g| g.page_size as usize == input.len()).collect();
            let geometry = match fitting.len() {
                0 => sqlite_geometries[rng.below(sqlite_geometries.len())],
                n if rng.below(8) != 0 => *fitting[rng.below(n)],
                _ => sqlite_geometries[rng.below(sqlite_geometries.len())],
            };
            let _ = sqlite::Header::parse(&input);
            match sqlite::parse_page(&input, page_no as u32, &geometry) {
                Ok(page) => {
                    parsed += 1;
                    check_interior(&page, page_no, geometry.page_count.map(u64::from), Engine::Sqlite);
                    if let Some(event) = traversal.on_read(page_no, Some(page.clone())) {
                        policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
                    }
                    // Descend into a random child: a TreeChildEnter.
                    let child = page.children[rng.below(page.children.len())];
                    if let Some(event @ Event::TreeChildEnter { .. }) = traversal.on_read(child, None) {
                        policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
                    }
                    assert!(out.iter().all(|r| r.ranges.len() <= max_ranges));
                    out.clear();
                }
                Err(err) => *reasons.entry(err.reason()).or_default() += 1,
            }
        } else {
            let fitting: Vec<_> = lmdb_geometries.iter().filter(|g| g.page_size as usize == input.len()).collect();
            let geometry = match fitting.len() {
                0 => lmdb_geometries[rng.below(lmdb_geometries.len())],
                n if rng.below(8) != 0 => *fitting[rng.below(n)],
                _ => lmdb_geometries[rng.below(lmdb_geometries.len())],
            };
            let _ = lmdb::Meta::parse(&input);
            match lmdb::parse_page(&input, page_no, &geometry) {
                Ok(page) => {
                    parsed += 1;
                    check_interior(&page, page_no, geometry.last_page, Engine::Lmdb);
                    let layout = DbPageLayout::new(Engine::Lmdb, geometry.page_size).expect("layout");
                    let position = rng.below(page.children.len()) as u32;
                    if let Some(event) = layout.enter_event(file.id(), page_no, &page, position) {
                        policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
                    }
                    out.clear();
                }
                Err(err) => *reasons.entry(err.reason()).or_default() += 1,
            }
        }
    }
    let (tracked_files, parents, recent) = policy.footprint();
    assert!(tracked_files <= 64 && parents <= 64 * 16 && recent <= 4096);
    assert!(traversal.remembered() <= 8);
    // The mutations must exercise both outcomes.
    assert!(parsed > iterations / 50, "only {parsed} of {iterations} inputs parsed");
    for reason in ["not_btree", "cell_out_of_bounds", "bad_child", "header", "length", "page_number", "cell_count"] {
        assert!(reasons.contains_key(reason), "no input hit {reason}: {reasons:?}");
    }
    eprintln!("{iterations} pages in {:?}: {parsed} parsed, passed over {reasons:?}", started.elapsed());
}

/// An enter event names pages as first 4 KiB pages, with the 4 KiB pages
/// each spans, and refuses a position outside the children.
#[test]
fn enter_event_maps_pages_and_checks_position() {
    let layout = DbPageLayout::new(Engine::Lmdb, 4096).expect("layout");
    let page = InteriorPage { kind: InteriorKind::LmdbBranch, children: vec![4, 5, 6] };
    let file = predictio::FileId { dev: 3, ino: 4 };
    let Some(Event::TreeChildEnter { children, parent, position, child_pages, .. }) =
        layout.enter_event(file, 2, &page, 1)
    else {
        panic!("no event");
    };
    assert_eq!((&children[..], parent, position, child_pages), (&[4u64, 5, 6][..], 2, 1, 1));
    assert!(layout.enter_event(file, 2, &page, 3).is_none());
    let big = DbPageLayout::new(Engine::Sqlite, 16384).expect("layout");
    let Some(Event::TreeChildEnter { children, parent, child_pages, .. }) = big.enter_event(file, 2, &page, 0) else {
        panic!("no event");
    };
    assert_eq!((&children[..], parent, child_pages), (&[12u64, 16, 20][..], 4, 4));
    let small = DbPageLayout::new(Engine::Sqlite, 1024).expect("layout");
    let Some(Event::TreeChildEnter { child_pages, .. }) = small.enter_event(file, 2, &page, 0) else {
        panic!("no event");
    };
    assert_eq!(child_pages, 1);
}

/// A scan through a file of 16 KiB pages, followed by a traversal and the
/// `btree` policy with its defaults, requests each leaf whole (four 4 KiB
/// pages), not its first 4 KiB.
#[test]
fn a_scan_of_large_pages_requests_whole_pages() {
    let layout = DbPageLayout::new(Engine::Sqlite, 16384).expect("layout");
    let file = FileRef::open(std::env::current_exe().expect("own exe")).expect("open");
    let mut files = FileTable::default();
    files.insert(file.clone());
    let mut traversal = Traversal::new(file.id(), layout, 16);
    let mut policy = BtreePolicy::new(BtreeConfig::default());
    let interior = InteriorPage { kind: InteriorKind::SqliteTable, children: (10..60).collect() };
    assert!(traversal.on_read(2, Some(interior)).is_none());
    let mut ranges = Vec::new();
    for leaf in 10..20 {
        let mut out = Vec::new();
        if let Some(event) = traversal.on_read(leaf, None) {
            policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
        }
        ranges.extend(out.into_iter().flat_map(|r| r.ranges.to_vec()));
    }
    assert!(!ranges.is_empty(), "a scan of ten leaves requested nothing");
    for range in &ranges {
        assert_eq!(range.len(), 4, "{range:?} is not one whole 16 KiB page");
        assert_eq!((range.start * 4096) % 16384, 0, "{range:?} does not start a database page");
    }
}
