//! What an exec reads of a program's first page to start it: a `#!`
//! script's interpreter line (`binfmt_script`), or an ELF executable's
//! program interpreter (`PT_INTERP`, the dynamic loader, which
//! `binfmt_elf` opens before the program runs). Pure parsing of bytes
//! someone else read; never panics on any input.
//!
//! A launch replay resolves these paths at the exec's start on the
//! executor's metadata threads ([`crate::request::MetaRequest::execs`]):
//! after `drop_caches` the exec's own lookups (the program's path and its
//! symbolic links, `/lib64/ld-linux-x86-64.so.2` and the links behind it)
//! each read a directory block or an inode, one after another, and queued
//! behind the replay's data they took 10–20 ms before the program ran.

/// Bytes of a program's head the parsers look at: the kernel reads
/// `BINPRM_BUF_SIZE` (256) for a `#!` line, and an ELF file's program
/// headers and interpreter path lie within its first page in practice.
pub const HEAD_BYTES: usize = 4096;

/// Bytes of a script's first line the kernel reads (`BINPRM_BUF_SIZE`);
/// [`shebang`] looks at no more.
pub const SHEBANG_BYTES: usize = 256;

/// ELF program header type of a loadable segment.
const PT_LOAD: u32 = 1;

/// ELF program header type of the interpreter path.
const PT_INTERP: u32 = 3;

/// Program headers looked at, at most (the kernel refuses more than fit in
/// 64 KiB; real executables have about a dozen).
const MAX_PHDRS: usize = 128;

/// The interpreter of `head` (a program's first bytes), as the exec will
/// open it: a `#!` line's interpreter, or an ELF file's `PT_INTERP`. `None`
/// for a static executable, anything else, or a head too short to tell.
pub fn interpreter(head: &[u8]) -> Option<&[u8]> {
    shebang(head).map(|(interpreter, _)| interpreter).or_else(|| elf_interpreter(head))
}

/// The interpreter line of a script whose head is `head`, if it starts
/// with `#!`: the interpreter and its optional single argument, split as
/// the kernel splits them (the rest of the line after the interpreter,
/// trimmed, is one argument). Only the first [`SHEBANG_BYTES`] count, as
/// for the kernel.
pub fn shebang(head: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let head = &head[..head.len().min(SHEBANG_BYTES)];
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let line = &line[line.iter().position(|b| !blank(b)).unwrap_or(line.len())..];
    let end = line.iter().position(blank).unwrap_or(line.len());
    let (interpreter, rest) = line.split_at(end);
    if interpreter.is_empty() {
        return None;
    }
    let rest = rest.trim_ascii();
    Some((interpreter, (!rest.is_empty()).then_some(rest)))
}

/// The program interpreter (`PT_INTERP`) of an ELF file whose head is
/// `head` (32- or 64-bit, either byte order), without its trailing NUL.
/// `None` if it is not ELF, has no interpreter, or its program headers or
/// the path lie beyond `head`.
pub fn elf_interpreter(head: &[u8]) -> Option<&[u8]> {
    let elf = Elf::of(head)?;
    elf.headers().find(|h| h.kind == PT_INTERP).and_then(|h| {
        let offset = usize::try_from(h.offset).ok()?;
        let size = usize::try_from(h.file_size).ok()?;
        let path = head.get(offset..offset.checked_add(size)?)?;
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        (!path.is_empty()).then_some(path)
    })
}

/// The file offsets where the exec zeroes the rest of a page of an ELF
/// file whose head is `head`: the end of each loadable segment's file part
/// where the segment is longer in memory (its `.bss`). The loader writes
/// zeros there while the exec maps the file (`padzero`), which faults that
/// page in before the program runs — before any event says the program
/// started.
pub fn elf_zeroed_offsets(head: &[u8]) -> Vec<u64> {
    let Some(elf) = Elf::of(head) else { return Vec::new() };
    elf.headers()
        .filter(|h| h.kind == PT_LOAD && h.memory_size > h.file_size && h.file_size > 0)
        .filter_map(|h| h.offset.checked_add(h.file_size))
        .collect()
}

/// An ELF head's layout: where its program headers are, how to read them.
struct Elf<'a> {
    head: &'a [u8],
    wide: bool,
    little: bool,
    phoff: usize,
    phentsize: usize,
    phnum: usize,
}

/// The fields of one program header the parsers use.
struct ProgramHeader {
    kind: u32,
    offset: u64,
    file_size: u64,
    memory_size: u64,
}

impl<'a> Elf<'a> {
    fn of(head: &'a [u8]) -> Option<Self> {
        if head.get(..4)? != b"\x7fELF" {
            return None;
        }
        let wide = match head.get(4)? {
            1 => false,
            2 => true,
            _ => return None,
        };
        let little = match head.get(5)? {
            1 => true,
            2 => false,
            _ => return None,
        };
        let mut elf = Elf { head, wide, little, phoff: 0, phentsize: 0, phnum: 0 };
        let (phoff, phentsize, phnum) = if wide {
            (elf.field(32, 8)?, elf.field(54, 2)?, elf.field(56, 2)?)
        } else {
            (elf.field(28, 4)?, elf.field(42, 2)?, elf.field(44, 2)?)
        };
        elf.phoff = usize::try_from(phoff).ok()?;
        elf.phentsize = usize::try_from(phentsize).ok()?;
        elf.phnum = usize::try_from(phnum).ok()?.min(MAX_PHDRS);
        (elf.phentsize >= if wide { 56 } else { 32 }).then_some(elf)
    }

    /// The unsigned integer of `len` bytes at `at`, in the file's order.
    fn field(&self, at: usize, len: usize) -> Option<u64> {
        let bytes = self.head.get(at..at.checked_add(len)?)?;
        let fold = |acc: u64, b: &u8| (acc << 8) | u64::from(*b);
        Some(if self.little { bytes.iter().rev().fold(0, fold) } else { bytes.iter().fold(0, fold) })
    }

    /// The program headers that lie within the head, in order.
    fn headers(&self) -> impl Iterator<Item = ProgramHeader> + '_ {
        (0..self.phnum).map_while(move |i| {
            let at = self.phoff.checked_add(i.checked_mul(self.phentsize)?)?;
            // (p_offset, p_filesz, p_memsz) and their width, by class.
            let ((offset, file_size, memory_size), word) = if self.wide { ((8, 32, 40), 8) } else { ((4, 16, 20), 4) };
            Some(ProgramHeader {
                kind: u32::try_from(self.field(at, 4)?).ok()?,
                offset: self.field(at + offset, word)?,
                file_size: self.field(at + file_size, word)?,
                memory_size: self.field(at + memory_size, word)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF head: header, `phdrs` program headers right after it,
    /// then `interp` (with its NUL) if given, named by a `PT_INTERP`.
    fn elf(wide: bool, little: bool, interp: Option<&str>) -> Vec<u8> {
        let put = |buf: &mut Vec<u8>, at: usize, len: usize, value: u64| {
            let bytes: Vec<u8> = (0..len).map(|i| (value >> (8 * i)) as u8).collect();
            let bytes: Vec<u8> = if little { bytes } else { bytes.into_iter().rev().collect() };
            buf[at..at + len].copy_from_slice(&bytes);
        };
        let (ehsize, phentsize) = if wide { (64, 56) } else { (52, 32) };
        let phnum = 2;
        let path_at = ehsize + phnum * phentsize;
        let mut b = vec![0u8; path_at + 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = if wide { 2 } else { 1 };
        b[5] = if little { 1 } else { 2 };
        let (phoff_at, phoff_len, entsize_at, num_at) = if wide { (32, 8, 54, 56) } else { (28, 4, 42, 44) };
        put(&mut b, phoff_at, phoff_len, ehsize as u64);
        put(&mut b, entsize_at, 2, phentsize as u64);
        put(&mut b, num_at, 2, phnum as u64);
        // The first header is a PT_LOAD (1) of 100 bytes of the file and
        // 300 in memory, the second the interpreter.
        put(&mut b, ehsize, 4, 1);
        let (off_at, size_at, mem_at, word) = if wide { (8, 32, 40, 8) } else { (4, 16, 20, 4) };
        put(&mut b, ehsize + off_at, word, 0x2000);
        put(&mut b, ehsize + size_at, word, 100);
        put(&mut b, ehsize + mem_at, word, 300);
        if let Some(interp) = interp {
            let ph = ehsize + phentsize;
            put(&mut b, ph, 4, u64::from(PT_INTERP));
            let (off_at, size_at, word) = if wide { (8, 32, 8) } else { (4, 16, 4) };
            put(&mut b, ph + off_at, word, path_at as u64);
            put(&mut b, ph + size_at, word, interp.len() as u64 + 1);
            b[path_at..path_at + interp.len()].copy_from_slice(interp.as_bytes());
        }
        b
    }

    #[test]
    fn elf_interpreters_of_both_classes_and_byte_orders() {
        for wide in [true, false] {
            for little in [true, false] {
                let head = elf(wide, little, Some("/lib/ld.so.1"));
                assert_eq!(elf_interpreter(&head), Some(&b"/lib/ld.so.1"[..]), "wide {wide} little {little}");
                assert_eq!(interpreter(&head), Some(&b"/lib/ld.so.1"[..]));
                assert_eq!(elf_interpreter(&elf(wide, little, None)), None, "a static executable");
                assert_eq!(elf_zeroed_offsets(&head), vec![0x2000 + 100], "where .bss begins");
            }
        }
    }

    #[test]
    fn a_real_executable_names_a_loader_that_exists() {
        use std::io::Read;
        let mut head = Vec::new();
        std::fs::File::open("/bin/sh").unwrap().take(HEAD_BYTES as u64).read_to_end(&mut head).unwrap();
        let interp = elf_interpreter(&head).expect("/bin/sh is dynamically linked");
        let interp = std::str::from_utf8(interp).unwrap();
        assert!(interp.starts_with('/') && std::path::Path::new(interp).exists(), "{interp}");
        let size = std::fs::metadata("/bin/sh").unwrap().len();
        let zeroed = elf_zeroed_offsets(&head);
        assert!(!zeroed.is_empty() && zeroed.iter().all(|&o| o <= size), "{zeroed:?}");
    }

    #[test]
    fn cut_or_corrupt_heads_name_nothing() {
        let head = elf(true, true, Some("/lib64/ld-linux-x86-64.so.2"));
        // Every truncation: the path beyond the head, headers cut short.
        for len in 0..head.len() - 40 {
            assert_eq!(elf_interpreter(&head[..len]), None, "cut at {len}");
        }
        let mut bad = head.clone();
        bad[4] = 3;
        assert_eq!(elf_interpreter(&bad), None, "unknown class");
        let mut bad = head.clone();
        bad[54] = 8;
        bad[55] = 0;
        assert_eq!(elf_interpreter(&bad), None, "program headers too small");
        let mut bad = head.clone();
        bad[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(elf_interpreter(&bad), None, "offsets that overflow");
        assert_eq!(elf_zeroed_offsets(&head[..70]), Vec::<u64>::new());
        assert_eq!(interpreter(b"just text"), None);
        assert_eq!(interpreter(b""), None);
    }

    #[test]
    fn shebang_lines_split_as_the_kernel_splits_them() {
        assert_eq!(shebang(b"#!/bin/sh\necho"), Some((&b"/bin/sh"[..], None)));
        assert_eq!(shebang(b"#! /usr/bin/env  python3 -u \n"), Some((&b"/usr/bin/env"[..], Some(&b"python3 -u"[..]))));
        assert_eq!(shebang(b"#!\n"), None);
        assert_eq!(shebang(b"#!   "), None);
        assert_eq!(shebang(b"echo"), None);
        assert_eq!(interpreter(b"#!/bin/sh -e\n"), Some(&b"/bin/sh"[..]));
        // Only the kernel's 256 bytes count.
        let mut long = b"#!/".to_vec();
        long.extend(std::iter::repeat_n(b'a', 300));
        assert_eq!(shebang(&long).map(|(i, _)| i.len()), Some(254));
    }
}
