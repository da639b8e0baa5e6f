//! The few functions of RocksDB's C API (`rocksdb/c.h`, 7.8) this crate
//! uses, declared by hand. Every other module reaches RocksDB through the
//! safe types in [`crate::db`]; this is the only place with `extern` items.

#![allow(non_camel_case_types, missing_docs)]

use libc::{c_char, c_int, c_uchar, c_void, size_t};

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque!(
    rocksdb_t,
    rocksdb_options_t,
    rocksdb_readoptions_t,
    rocksdb_writeoptions_t,
    rocksdb_iterator_t,
    rocksdb_writebatch_t,
    rocksdb_livefiles_t,
    rocksdb_flushoptions_t
);

unsafe extern "C" {
    pub fn rocksdb_options_create() -> *mut rocksdb_options_t;
    pub fn rocksdb_options_destroy(o: *mut rocksdb_options_t);
    pub fn rocksdb_get_options_from_string(
        base: *const rocksdb_options_t,
        opts: *const c_char,
        new_options: *mut rocksdb_options_t,
        errptr: *mut *mut c_char,
    );
    pub fn rocksdb_open(o: *const rocksdb_options_t, name: *const c_char, errptr: *mut *mut c_char) -> *mut rocksdb_t;
    pub fn rocksdb_close(db: *mut rocksdb_t);
    pub fn rocksdb_free(ptr: *mut c_void);

    pub fn rocksdb_writeoptions_create() -> *mut rocksdb_writeoptions_t;
    pub fn rocksdb_writeoptions_destroy(o: *mut rocksdb_writeoptions_t);
    pub fn rocksdb_writeoptions_disable_WAL(o: *mut rocksdb_writeoptions_t, disable: c_int);
    pub fn rocksdb_writebatch_create() -> *mut rocksdb_writebatch_t;
    pub fn rocksdb_writebatch_destroy(b: *mut rocksdb_writebatch_t);
    pub fn rocksdb_writebatch_clear(b: *mut rocksdb_writebatch_t);
    pub fn rocksdb_writebatch_put(
        b: *mut rocksdb_writebatch_t,
        key: *const c_char,
        klen: size_t,
        val: *const c_char,
        vlen: size_t,
    );
    pub fn rocksdb_write(
        db: *mut rocksdb_t,
        o: *const rocksdb_writeoptions_t,
        batch: *mut rocksdb_writebatch_t,
        errptr: *mut *mut c_char,
    );
    pub fn rocksdb_flushoptions_create() -> *mut rocksdb_flushoptions_t;
    pub fn rocksdb_flushoptions_destroy(o: *mut rocksdb_flushoptions_t);
    pub fn rocksdb_flushoptions_set_wait(o: *mut rocksdb_flushoptions_t, wait: c_uchar);
    pub fn rocksdb_flush(db: *mut rocksdb_t, o: *const rocksdb_flushoptions_t, errptr: *mut *mut c_char);
    pub fn rocksdb_compact_range(
        db: *mut rocksdb_t,
        start: *const c_char,
        start_len: size_t,
        limit: *const c_char,
        limit_len: size_t,
    );

    pub fn rocksdb_readoptions_create() -> *mut rocksdb_readoptions_t;
    pub fn rocksdb_readoptions_destroy(o: *mut rocksdb_readoptions_t);
    pub fn rocksdb_readoptions_set_readahead_size(o: *mut rocksdb_readoptions_t, size: size_t);
    pub fn rocksdb_readoptions_set_iterate_upper_bound(o: *mut rocksdb_readoptions_t, key: *const c_char, len: size_t);
    pub fn rocksdb_readoptions_set_iterate_lower_bound(o: *mut rocksdb_readoptions_t, key: *const c_char, len: size_t);
    pub fn rocksdb_get(
        db: *mut rocksdb_t,
        o: *const rocksdb_readoptions_t,
        key: *const c_char,
        klen: size_t,
        vlen: *mut size_t,
        errptr: *mut *mut c_char,
    ) -> *mut c_char;

    pub fn rocksdb_create_iterator(db: *mut rocksdb_t, o: *const rocksdb_readoptions_t) -> *mut rocksdb_iterator_t;
    pub fn rocksdb_iter_destroy(it: *mut rocksdb_iterator_t);
    pub fn rocksdb_iter_valid(it: *const rocksdb_iterator_t) -> c_uchar;
    pub fn rocksdb_iter_seek_to_first(it: *mut rocksdb_iterator_t);
    pub fn rocksdb_iter_seek(it: *mut rocksdb_iterator_t, k: *const c_char, klen: size_t);
    pub fn rocksdb_iter_seek_for_prev(it: *mut rocksdb_iterator_t, k: *const c_char, klen: size_t);
    pub fn rocksdb_iter_next(it: *mut rocksdb_iterator_t);
    pub fn rocksdb_iter_prev(it: *mut rocksdb_iterator_t);
    pub fn rocksdb_iter_key(it: *const rocksdb_iterator_t, klen: *mut size_t) -> *const c_char;
    pub fn rocksdb_iter_value(it: *const rocksdb_iterator_t, vlen: *mut size_t) -> *const c_char;
    pub fn rocksdb_iter_get_error(it: *const rocksdb_iterator_t, errptr: *mut *mut c_char);

    pub fn rocksdb_approximate_sizes(
        db: *mut rocksdb_t,
        num_ranges: c_int,
        start: *const *const c_char,
        start_len: *const size_t,
        limit: *const *const c_char,
        limit_len: *const size_t,
        sizes: *mut u64,
        errptr: *mut *mut c_char,
    );
    pub fn rocksdb_property_value(db: *mut rocksdb_t, name: *const c_char) -> *mut c_char;
    pub fn rocksdb_livefiles(db: *mut rocksdb_t) -> *const rocksdb_livefiles_t;
    pub fn rocksdb_livefiles_count(l: *const rocksdb_livefiles_t) -> c_int;
    pub fn rocksdb_livefiles_name(l: *const rocksdb_livefiles_t, index: c_int) -> *const c_char;
    pub fn rocksdb_livefiles_level(l: *const rocksdb_livefiles_t, index: c_int) -> c_int;
    pub fn rocksdb_livefiles_size(l: *const rocksdb_livefiles_t, index: c_int) -> size_t;
    pub fn rocksdb_livefiles_smallestkey(
        l: *const rocksdb_livefiles_t,
        index: c_int,
        size: *mut size_t,
    ) -> *const c_char;
    pub fn rocksdb_livefiles_largestkey(
        l: *const rocksdb_livefiles_t,
        index: c_int,
        size: *mut size_t,
    ) -> *const c_char;
    pub fn rocksdb_livefiles_destroy(l: *const rocksdb_livefiles_t);
}
