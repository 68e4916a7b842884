//! montrace's eBPF object as it goes to the loader: its hash maps made without preallocation
//! where the kernel allows it.
//!
//! A hash map is preallocated by default: the kernel allocates and charges to the memory cgroup
//! every one of its `max_entries` elements when the map is made. montrace's four hash maps are
//! sized for the largest trees (65,536 processes, 16,384 exits waiting for their last switch), so
//! preallocating them took about 20 MiB and a tenth of a run's own CPU, on the start-up's
//! critical path (a `perf` profile of `montrace run -- /bin/true`: `map_create` 12 % of montrace's
//! CPU, most of it in `htab_map_alloc` and memory-cgroup charging). Without preallocation
//! (`BPF_F_NO_PREALLOC`) an element is allocated when it is inserted, from the kernel's per-CPU
//! BPF allocator.
//!
//! Tracing programs may use such maps since Linux 6.1 (the hash map moved to `bpf_mem_alloc`;
//! before, the verifier refused them in tracepoint programs with "trace type programs can only
//! use preallocated hash map"): older kernels get the object as built. aya 0.14 has no way to
//! set a map's flags, so they are set in a copy of the object's legacy map definitions
//! (`struct bpf_map_def` in its `maps` section, at each map's symbol) before aya reads it.
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

/// uapi linux/bpf.h: `BPF_F_NO_PREALLOC`.
pub const BPF_F_NO_PREALLOC: u32 = 1;

/// The maps made without preallocation (hash maps only: the flag means nothing else to them).
pub const UNPREALLOCATED_MAPS: [&str; 4] = ["TRACKED", "PENDING", "WAITS", "NET"];

/// Offset of `map_flags` in `struct bpf_map_def` (type, key_size, value_size, max_entries,
/// map_flags, ...: u32 each).
const MAP_FLAGS_OFFSET: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error("montrace's eBPF object cannot be read: {0}")]
    Parse(#[from] object::Error),
    #[error("montrace's eBPF object has no map definition {0} in its maps section")]
    NoMap(String),
}

/// An eBPF object's bytes, 8-byte aligned as the ELF reader wants them.
pub struct AlignedObject {
    words: Vec<u64>,
    len: usize,
}

impl AlignedObject {
    fn new(bytes: &[u8]) -> AlignedObject {
        let mut object = AlignedObject {
            words: vec![0u64; bytes.len().div_ceil(8)],
            len: bytes.len(),
        };
        object.bytes_mut().copy_from_slice(bytes);
        object
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the words own at least `len` initialized bytes; u8 has no alignment needs.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and the borrow is unique through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// A copy of the ELF object `elf` in which the legacy map definitions named `maps` have `flags`
/// added to their `map_flags` (little-endian: the object is built for `bpfel`).
pub fn with_map_flags(elf: &[u8], maps: &[&str], flags: u32) -> Result<AlignedObject, PatchError> {
    let mut at = Vec::with_capacity(maps.len());
    {
        let file = object::File::parse(elf)?;
        for name in maps {
            let symbol = file
                .symbols()
                .find(|s| s.name() == Ok(name))
                .ok_or_else(|| PatchError::NoMap(name.to_string()))?;
            let section = symbol
                .section_index()
                .and_then(|index| file.section_by_index(index).ok())
                .filter(|section| section.name() == Ok("maps"))
                .ok_or_else(|| PatchError::NoMap(name.to_string()))?;
            let (offset, size) = section
                .file_range()
                .ok_or_else(|| PatchError::NoMap(name.to_string()))?;
            let field = symbol.address() + MAP_FLAGS_OFFSET as u64;
            if field + 4 > size {
                return Err(PatchError::NoMap(name.to_string()));
            }
            at.push((offset + field) as usize);
        }
    }
    let mut object = AlignedObject::new(elf);
    let bytes = object.bytes_mut();
    for at in at {
        let field: &mut [u8; 4] = (&mut bytes[at..at + 4]).try_into().expect("a 4-byte range");
        *field = (u32::from_le_bytes(*field) | flags).to_le_bytes();
    }
    Ok(object)
}

/// Whether a kernel of this release (`uname -r`, e.g. `6.18.44-fc`) lets tracing programs use
/// hash maps without preallocation: Linux 6.1 and later.
pub fn allows_unpreallocated_maps(release: &str) -> bool {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (6, 1),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_defs(bytes: &[u8]) -> std::collections::HashMap<String, aya_obj::maps::bpf_map_def> {
        let object = aya_obj::Object::parse(bytes).expect("parse");
        object
            .maps
            .into_iter()
            .filter_map(|(name, map)| match map {
                aya_obj::Map::Legacy(legacy) => Some((name, legacy.def)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_hash_maps_of_the_object_lose_their_preallocation_and_nothing_else_changes() {
        let built = crate::kernel::ebpf::OBJECT;
        let patched = with_map_flags(built, &UNPREALLOCATED_MAPS, BPF_F_NO_PREALLOC).unwrap();
        assert_eq!(patched.bytes().len(), built.len());
        let (before, after) = (map_defs(built), map_defs(patched.bytes()));
        assert_eq!(before.len(), after.len());
        for (name, def) in &before {
            let new = &after[name];
            let expected = if UNPREALLOCATED_MAPS.contains(&name.as_str()) {
                // BPF_MAP_TYPE_HASH
                assert_eq!(def.map_type, 1, "{name} is a hash map");
                def.map_flags | BPF_F_NO_PREALLOC
            } else {
                def.map_flags
            };
            assert_eq!(new.map_flags, expected, "{name}");
            assert_eq!(
                (new.map_type, new.key_size, new.value_size, new.max_entries),
                (def.map_type, def.key_size, def.value_size, def.max_entries),
                "{name}"
            );
        }
        // Only the four flags words differ.
        let differing = built
            .iter()
            .zip(patched.bytes())
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(differing, UNPREALLOCATED_MAPS.len());
    }

    #[test]
    fn a_map_that_is_not_there_is_an_error() {
        let err = with_map_flags(crate::kernel::ebpf::OBJECT, &["NOPE"], 1)
            .err()
            .unwrap();
        assert!(err.to_string().contains("NOPE"), "{err}");
    }

    #[test]
    fn kernels_from_6_1_allow_maps_without_preallocation() {
        for (release, allowed) in [
            ("6.18.44-fc-v669", true),
            ("6.1.0-13-amd64", true),
            ("6.0.19", false),
            ("5.15.0-91-generic", false),
            ("7.0", true),
            ("garbage", false),
        ] {
            assert_eq!(allows_unpreallocated_maps(release), allowed, "{release}");
        }
    }
}
