//! A minimal reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`), just enough to compute the
//! struct field offsets the eBPF programs need.
//!
//! aya-ebpf has no CO-RE relocations, so the programs cannot ask the loader to patch field
//! offsets; instead the agent looks them up here and writes them into the programs' read-only
//! `OFFSETS` global before load. Format reference: the kernel's `Documentation/bpf/btf.rst`.
//!
//! Only native little-endian BTF is accepted (the BTF we read always comes from the running
//! kernel, and montrace only targets little-endian machines). Every read is bounds-checked:
//! malformed input gives [`BtfError::Malformed`], never a panic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use monitor_common::Offsets;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read kernel BTF at {path}: {source}. montrace needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (/sys/kernel/btf/vmlinux)")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed BTF: {0}")]
    Malformed(String),
    /// What is missing, e.g. "struct task_struct", "field task_struct.se.sum_exec_runtime",
    /// "enumerator MM_ANONPAGES".
    #[error("kernel BTF has no {0}")]
    Missing(String),
}

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const HEADER_LEN: usize = 24;
/// `struct btf_type`: name_off, info, size/type.
const TYPE_LEN: usize = 12;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Bounds recursion and modifier chains so that cyclic (malformed) type graphs end in an error
/// instead of a hang or a stack overflow. Real kernels nest a few levels at most.
const MAX_DEPTH: u32 = 64;

fn malformed(msg: impl Into<String>) -> BtfError {
    BtfError::Malformed(msg.into())
}

/// Parsed kernel BTF: the raw bytes plus an index of where each type's record starts. Names are
/// looked up when asked for, in one pass for many names ([`Btf::find_structs`]): an index of
/// every struct name took most of the parse's time, at start-up.
pub struct Btf {
    data: Bytes,
    /// Absolute byte range of the string section within `data`.
    str_start: usize,
    str_end: usize,
    /// `types[id - 1]` is the absolute offset of type `id`'s record (id 0 is `void`).
    types: Vec<usize>,
}

impl std::fmt::Debug for Btf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Btf")
            .field("bytes", &self.data.len())
            .field("types", &self.types.len())
            .finish()
    }
}

/// The BTF's bytes: mapped from the kernel's file, or read.
enum Bytes {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(bytes) => bytes,
            Bytes::Mapped(map) => map,
        }
    }
}

/// One decoded `struct btf_type` header; `extra` is where its kind-specific data starts.
#[derive(Clone, Copy, Debug)]
struct TypeRec {
    name_off: u32,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    /// `size` for INT/STRUCT/UNION/ENUM/ENUM64/FLOAT/DATASEC, `type` for the others.
    size_or_type: u32,
    extra: usize,
}

/// A member found inside a struct/union, its offset already made relative to the outermost
/// struct searched (anonymous wrappers folded in).
#[derive(Clone, Copy, Debug)]
struct Member {
    bit_offset: u64,
    type_id: u32,
    bitfield_size: u32,
}

fn read_u16(data: &[u8], off: usize) -> Option<u16> {
    let b = data.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn read_u32(data: &[u8], off: usize) -> Option<u32> {
    let b = data.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Bytes of kind-specific data that follow a `struct btf_type` of this kind.
fn trailing_len(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * vlen,
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
        | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

impl Btf {
    /// Parses a BTF blob (copied; the returned `Btf` does not borrow `data`).
    pub fn parse(data: &[u8]) -> Result<Btf, BtfError> {
        Self::parse_owned(Bytes::Owned(data.to_vec()))
    }

    /// Maps the file where the kernel allows it (`/sys/kernel/btf/vmlinux` on Linux 6.16 and
    /// later), else reads it: sysfs hands a read 4 KiB at a time, so reading the kernel's 5 MB
    /// took 1,300 system calls and 4 to 9 ms of start-up.
    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let io = |source| BtfError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // A private read-only mapping: the kernel refuses a shared one (EACCES).
        // SAFETY: the kernel's BTF never changes under the mapping, and any other file is only
        // read through bounds-checked accesses.
        let data = match unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) } {
            Ok(map) if !map.is_empty() => Bytes::Mapped(map),
            _ => {
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut &file, &mut data).map_err(io)?;
                Bytes::Owned(data)
            }
        };
        Self::parse_owned(data)
    }

    fn parse_owned(data: Bytes) -> Result<Btf, BtfError> {
        let magic = read_u16(&data, 0).ok_or_else(|| malformed("shorter than its header"))?;
        if magic == MAGIC.swap_bytes() {
            return Err(malformed("big-endian BTF is not supported"));
        }
        if magic != MAGIC {
            return Err(malformed(format!(
                "bad magic {magic:#06x} (expected {MAGIC:#06x})"
            )));
        }
        if data.len() < HEADER_LEN {
            return Err(malformed("shorter than its header"));
        }
        let version = data[2];
        if version != 1 {
            return Err(malformed(format!("unsupported version {version}")));
        }
        // Fields are at fixed places within the HEADER_LEN bytes checked above, but reading
        // through read_u32 keeps every access checked in one way.
        let field = |off: usize| {
            read_u32(&data, off)
                .map(|v| v as usize)
                .ok_or_else(|| malformed("shorter than its header"))
        };
        let hdr_len = field(4)?;
        let (type_off, type_len) = (field(8)?, field(12)?);
        let (str_off, str_len) = (field(16)?, field(20)?);
        if hdr_len < HEADER_LEN {
            return Err(malformed(format!("header length {hdr_len} < {HEADER_LEN}")));
        }
        let section = |name: &str, off: usize, len: usize| {
            let start = hdr_len.checked_add(off);
            let end = start.and_then(|s| s.checked_add(len));
            match (start, end) {
                (Some(s), Some(e)) if e <= data.len() => Ok((s, e)),
                _ => Err(malformed(format!(
                    "{name} section ({off}+{len} after a {hdr_len}-byte header) runs past the end of the data ({} bytes)",
                    data.len()
                ))),
            }
        };
        let (type_start, type_end) = section("type", type_off, type_len)?;
        let (str_start, str_end) = section("string", str_off, str_len)?;
        // Offset 0 must be the empty string: anonymous types and members use name_off 0.
        if str_len == 0 || data[str_start] != 0 {
            return Err(malformed(
                "string section does not start with an empty string",
            ));
        }

        let mut btf = Btf {
            data,
            str_start,
            str_end,
            // vmlinux averages ~37 bytes per type; reserving avoids regrowing a 150k-entry Vec.
            types: Vec::with_capacity(type_len / 32),
        };
        let mut off = type_start;
        while off < type_end {
            let id = u32::try_from(btf.types.len() + 1)
                .map_err(|_| malformed("more types than fit a 32-bit id"))?;
            let rec = btf.decode(off, type_end)?;
            let extra_len = trailing_len(rec.kind, rec.vlen as usize)
                .ok_or_else(|| malformed(format!("type {id} has unknown kind {}", rec.kind)))?;
            let next = rec
                .extra
                .checked_add(extra_len)
                .filter(|&n| n <= type_end)
                .ok_or_else(|| {
                    malformed(format!("type {id} runs past the end of the type section"))
                })?;
            if rec.name_off as usize >= str_len {
                return Err(malformed(format!(
                    "type {id}'s name offset {} is past the string section",
                    rec.name_off
                )));
            }
            btf.types.push(off);
            off = next;
        }
        Ok(btf)
    }

    /// Whether the string at `name_off` is `name` (compared in place: no scan for its end).
    fn name_is(&self, name_off: u32, name: &[u8]) -> bool {
        let start = self.str_start + name_off as usize;
        let end = start + name.len();
        end < self.str_end && &self.data[start..end] == name && self.data[end] == 0
    }

    /// The ids of the named structs, in one pass over the types: for each name the first
    /// complete struct, else the first complete union (a few kernel types are unions at top
    /// level). A FWD or an empty/zero-sized declaration can precede the complete definition,
    /// so only complete types count. Absent names are absent from the map.
    pub fn find_structs<'n>(&self, names: &[&'n str]) -> Result<HashMap<&'n str, u32>, BtfError> {
        let mut first_byte = [false; 256];
        for name in names {
            if let Some(&b) = name.as_bytes().first() {
                first_byte[b as usize] = true;
            }
        }
        let mut structs: HashMap<&'n str, u32> = HashMap::new();
        let mut unions: HashMap<&'n str, u32> = HashMap::new();
        for (index, &off) in self.types.iter().enumerate() {
            let rec = self.decode(off, self.data.len())?;
            let found = match rec.kind {
                KIND_STRUCT => &mut structs,
                KIND_UNION => &mut unions,
                _ => continue,
            };
            if rec.name_off == 0 || rec.vlen == 0 || rec.size_or_type == 0 {
                continue;
            }
            let first = self.data.get(self.str_start + rec.name_off as usize);
            if !first.is_some_and(|&b| first_byte[b as usize]) {
                continue;
            }
            if let Some(name) = names
                .iter()
                .find(|n| self.name_is(rec.name_off, n.as_bytes()))
            {
                found.entry(name).or_insert(index as u32 + 1);
            }
        }
        for (name, id) in unions {
            structs.entry(name).or_insert(id);
        }
        Ok(structs)
    }

    /// Decodes the fixed part of the type record at `off`, which must end by `limit`.
    fn decode(&self, off: usize, limit: usize) -> Result<TypeRec, BtfError> {
        let end = off.checked_add(TYPE_LEN).filter(|&e| e <= limit);
        let (Some(extra), Some(name_off), Some(info), Some(size_or_type)) = (
            end,
            read_u32(&self.data, off),
            read_u32(&self.data, off + 4),
            read_u32(&self.data, off + 8),
        ) else {
            return Err(malformed(format!("truncated type record at byte {off}")));
        };
        Ok(TypeRec {
            name_off,
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kind_flag: info >> 31 != 0,
            size_or_type,
            extra,
        })
    }

    /// The record of type `id`; `void` (0) and ids past the last type are errors because every
    /// caller needs a real type.
    fn record(&self, id: u32) -> Result<TypeRec, BtfError> {
        let off = (id as usize)
            .checked_sub(1)
            .and_then(|i| self.types.get(i))
            .ok_or_else(|| {
                if id == 0 {
                    malformed("reference to void where a type was expected")
                } else {
                    malformed(format!("reference to type {id}, past the last type"))
                }
            })?;
        // Records were bounds-checked against the type section while indexing.
        self.decode(*off, self.data.len())
    }

    fn u32_at(&self, off: usize) -> Result<u32, BtfError> {
        read_u32(&self.data, off)
            .ok_or_else(|| malformed(format!("read past the end at byte {off}")))
    }

    fn name(&self, name_off: u32) -> Result<&[u8], BtfError> {
        str_at(&self.data, self.str_start, self.str_end, name_off)
    }

    /// Follows typedefs and qualifiers down to the type they name.
    fn resolve(&self, mut id: u32) -> Result<(u32, TypeRec), BtfError> {
        for _ in 0..MAX_DEPTH {
            let rec = self.record(id)?;
            match rec.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = rec.size_or_type;
                }
                _ => return Ok((id, rec)),
            }
        }
        Err(malformed(format!(
            "typedef/qualifier chain through type {id} is too long (a cycle?)"
        )))
    }

    fn find_struct(&self, name: &str) -> Result<u32, BtfError> {
        self.find_structs(&[name])?
            .get(name)
            .copied()
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))
    }

    /// Finds member `name` in the struct/union `rec`, descending into anonymous struct/union
    /// members in declaration order, as C name lookup does.
    fn find_member(
        &self,
        rec: &TypeRec,
        name: &[u8],
        depth: u32,
    ) -> Result<Option<Member>, BtfError> {
        if depth >= MAX_DEPTH {
            return Err(malformed("anonymous members nest too deeply (a cycle?)"));
        }
        for i in 0..rec.vlen as usize {
            let m = rec.extra + i * 12;
            let (m_name, m_type, m_off) =
                (self.u32_at(m)?, self.u32_at(m + 4)?, self.u32_at(m + 8)?);
            // With kind_flag set the offset word also carries the bitfield width.
            let (bit_offset, bitfield_size) = if rec.kind_flag {
                (m_off & 0x00ff_ffff, m_off >> 24)
            } else {
                (m_off, 0)
            };
            if m_name == 0 {
                // Unnamed members are anonymous structs/unions, or unnamed padding bitfields,
                // which cannot hold a named member.
                let (_, inner) = self.resolve(m_type)?;
                if matches!(inner.kind, KIND_STRUCT | KIND_UNION) {
                    if let Some(found) = self.find_member(&inner, name, depth + 1)? {
                        return Ok(Some(Member {
                            bit_offset: found.bit_offset + u64::from(bit_offset),
                            ..found
                        }));
                    }
                }
            } else if self.name(m_name)? == name {
                return Ok(Some(Member {
                    bit_offset: u64::from(bit_offset),
                    type_id: m_type,
                    bitfield_size,
                }));
            }
        }
        Ok(None)
    }

    /// Whether a member is a bitfield in a struct without kind_flag, where the width lives in the
    /// member's INT type encoding instead of the member's offset word.
    fn is_int_bitfield(&self, type_id: u32) -> Result<bool, BtfError> {
        let (_, rec) = self.resolve(type_id)?;
        if rec.kind != KIND_INT {
            return Ok(false);
        }
        let encoding = self.u32_at(rec.extra)?;
        let (bits, offset) = (encoding & 0xff, (encoding >> 16) & 0xff);
        Ok(offset != 0 || u64::from(bits) != u64::from(rec.size_or_type) * 8)
    }

    /// Byte offset of a (possibly nested, dot-separated) member inside a struct/union:
    /// `member_offset("task_struct", "se.sum_exec_runtime")`. Members of anonymous struct/union
    /// members are searched transparently (mm_struct wraps nearly all its fields in an anonymous
    /// struct). Typedefs, const/volatile/type_tag are resolved when descending. Bitfield members
    /// are an error (Malformed). Pointers are not followed.
    pub fn member_offset(&self, struct_name: &str, path: &str) -> Result<u32, BtfError> {
        self.member_offset_in(self.find_struct(struct_name)?, struct_name, path)
    }

    /// [`Btf::member_offset`] in the struct `struct_name` whose id is known.
    fn member_offset_in(
        &self,
        type_id: u32,
        struct_name: &str,
        path: &str,
    ) -> Result<u32, BtfError> {
        self.member_at(type_id, struct_name, path)
            .map(|(offset, _)| offset)
    }

    /// [`Btf::member_offset_in`] and the member's type id.
    fn member_at(
        &self,
        mut type_id: u32,
        struct_name: &str,
        path: &str,
    ) -> Result<(u32, u32), BtfError> {
        let mut bits: u64 = 0;
        let mut walked = String::from(struct_name);
        for component in path.split('.') {
            let (_, rec) = self.resolve(type_id)?;
            if !matches!(rec.kind, KIND_STRUCT | KIND_UNION) {
                return Err(malformed(format!(
                    "{walked} is not a struct or union (BTF kind {}), cannot look up .{component} in it",
                    rec.kind
                )));
            }
            walked.push('.');
            walked.push_str(component);
            let member = self
                .find_member(&rec, component.as_bytes(), 0)?
                .ok_or_else(|| BtfError::Missing(format!("field {struct_name}.{path}")))?;
            if member.bitfield_size != 0
                || member.bit_offset % 8 != 0
                || (!rec.kind_flag && self.is_int_bitfield(member.type_id)?)
            {
                return Err(malformed(format!(
                    "{walked} is a bitfield, it has no byte offset"
                )));
            }
            bits += member.bit_offset;
            type_id = member.type_id;
        }
        let offset = u32::try_from(bits / 8).map_err(|_| {
            malformed(format!(
                "offset of {struct_name}.{path} does not fit 32 bits"
            ))
        })?;
        Ok((offset, type_id))
    }

    /// A BTF blob in which the named typedefs (`btf_trace_<tracepoint>`) and functions
    /// (`bpf_iter_task`) sit at the ids they have here, every other id holding a nameless
    /// pointer: what aya needs to attach `tp_btf` and `iter` programs (it looks their targets
    /// up by name for their ids), without parsing the whole kernel BTF a second time at
    /// start-up. A name absent here is absent there too (aya then says it is unknown).
    pub fn attach_subset(&self, typedefs: &[&str], funcs: &[&str]) -> Result<Vec<u8>, BtfError> {
        let mut found: Vec<(u32, u32, &str)> = Vec::new();
        for (index, &off) in self.types.iter().enumerate() {
            let rec = self.decode(off, self.data.len())?;
            let names: &[&str] = match rec.kind {
                KIND_TYPEDEF => typedefs,
                KIND_FUNC => funcs,
                _ => continue,
            };
            if let Some(wanted) = names
                .iter()
                .find(|n| self.name_is(rec.name_off, n.as_bytes()))
            {
                if !found
                    .iter()
                    .any(|(_, kind, n)| *kind == rec.kind && n == wanted)
                {
                    found.push((index as u32 + 1, rec.kind, wanted));
                }
            }
        }
        let last = found.iter().map(|(id, _, _)| *id).max().unwrap_or(0);
        let mut strings = vec![0u8];
        let mut named = HashMap::new();
        for (id, kind, name) in &found {
            named.insert(*id, (*kind, strings.len() as u32));
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
        }
        let mut types = Vec::with_capacity(last as usize * TYPE_LEN);
        for id in 1..=last {
            let (name_off, info) = match named.get(&id) {
                Some(&(kind, name_off)) => (name_off, kind << 24),
                None => (0, KIND_PTR << 24),
            };
            for word in [name_off, info, 0] {
                types.extend_from_slice(&word.to_le_bytes());
            }
        }
        let mut blob = Vec::with_capacity(HEADER_LEN + types.len() + strings.len());
        blob.extend_from_slice(&MAGIC.to_le_bytes());
        blob.extend_from_slice(&[1, 0]);
        for word in [
            HEADER_LEN as u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            blob.extend_from_slice(&word.to_le_bytes());
        }
        blob.extend_from_slice(&types);
        blob.extend_from_slice(&strings);
        Ok(blob)
    }

    /// Size in bytes of type `id` (typedefs and qualifiers resolved).
    fn type_size(&self, id: u32) -> Result<u32, BtfError> {
        let (_, rec) = self.resolve(id)?;
        match rec.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                Ok(rec.size_or_type)
            }
            KIND_PTR => Ok(8),
            KIND_ARRAY => {
                let (elem, count) = (self.u32_at(rec.extra)?, self.u32_at(rec.extra + 8)?);
                self.type_size(elem)?
                    .checked_mul(count)
                    .ok_or_else(|| malformed("an array's size does not fit 32 bits"))
            }
            kind => Err(malformed(format!(
                "type {id} (BTF kind {kind}) has no size"
            ))),
        }
    }

    /// Where `mm_struct`'s resident-page counters are: (offset of counter 0's value, stride).
    /// Since Linux 6.2 `rss_stat` is an array of `struct percpu_counter` (the value is its
    /// `count`); before, it is `struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; }`
    /// (the value is the atomic's `counter`).
    /// The third value: whether each counter is a struct named as such (a `percpu_counter`),
    /// which the verifier lets a program load from directly; an `atomic_long_t` is a typedef.
    fn rss_counters(&self, mm_id: u32) -> Result<(u32, u32, bool), BtfError> {
        let (mut base, mut array) = self.member_at(mm_id, "mm_struct", "rss_stat")?;
        let (resolved, rec) = self.resolve(array)?;
        if matches!(rec.kind, KIND_STRUCT | KIND_UNION) {
            let (count, count_type) = self.member_at(resolved, "mm_rss_stat", "count")?;
            base += count;
            array = count_type;
        }
        let (_, rec) = self.resolve(array)?;
        if rec.kind != KIND_ARRAY {
            return Err(malformed(format!(
                "mm_struct.rss_stat is neither an array nor a struct holding one (BTF kind {})",
                rec.kind
            )));
        }
        let elem = self.u32_at(rec.extra)?;
        let stride = self.type_size(elem)?;
        let (elem_id, elem_rec) = self.resolve(elem)?;
        let value = if matches!(elem_rec.kind, KIND_STRUCT | KIND_UNION) {
            match self.member_at(elem_id, "rss counter", "count") {
                Ok((offset, _)) => offset,
                Err(BtfError::Missing(_)) => self.member_at(elem_id, "rss counter", "counter")?.0,
                Err(e) => return Err(e),
            }
        } else {
            0
        };
        let typed = self.record(elem)?.kind == KIND_STRUCT;
        Ok((base + value, stride, typed))
    }

    /// The number of arguments a `tp_btf` program of each named tracepoint gets: the parameters
    /// of its `btf_trace_<name>` prototype (a typedef of a pointer to a function) but the first,
    /// the tracepoint's own `void *` data. In one pass over the types; absent names are absent.
    pub fn tracepoint_args<'n>(
        &self,
        tracepoints: &[&'n str],
    ) -> Result<HashMap<&'n str, u32>, BtfError> {
        let typedefs: Vec<String> = tracepoints
            .iter()
            .map(|tp| format!("btf_trace_{tp}"))
            .collect();
        let mut args = HashMap::new();
        for &off in self.types.iter() {
            let rec = self.decode(off, self.data.len())?;
            if rec.kind != KIND_TYPEDEF || rec.name_off == 0 {
                continue;
            }
            let Some(index) = typedefs
                .iter()
                .position(|n| self.name_is(rec.name_off, n.as_bytes()))
            else {
                continue;
            };
            let (_, ptr) = self.resolve(rec.size_or_type)?;
            let (_, proto) = match ptr.kind {
                KIND_PTR => self.resolve(ptr.size_or_type)?,
                _ => continue,
            };
            if proto.kind == KIND_FUNC_PROTO {
                args.entry(tracepoints[index])
                    .or_insert(proto.vlen.saturating_sub(1));
            }
        }
        Ok(args)
    }

    /// Size in bytes of a named struct (e.g. "percpu_counter").
    pub fn struct_size(&self, struct_name: &str) -> Result<u32, BtfError> {
        let id = self.find_struct(struct_name)?;
        Ok(self.record(id)?.size_or_type)
    }

    /// Value of a named enumerator in any ENUM/ENUM64 (e.g. "MM_ANONPAGES"); the first match
    /// wins. An unsigned 64-bit value above `i64::MAX` comes back as its two's-complement bits.
    pub fn enumerator(&self, name: &str) -> Result<i64, BtfError> {
        // Only a handful of lookups happen per run, so a scan beats building an index of every
        // enumerator in the kernel.
        for id in 1..=self.types.len() as u32 {
            let rec = self.record(id)?;
            let stride = match rec.kind {
                KIND_ENUM => 8,
                KIND_ENUM64 => 12,
                _ => continue,
            };
            for i in 0..rec.vlen as usize {
                let e = rec.extra + i * stride;
                if !self.name_is(self.u32_at(e)?, name.as_bytes()) {
                    continue;
                }
                let lo = self.u32_at(e + 4)?;
                // kind_flag marks a signed enum; older kernels leave it 0 for everything, but the
                // values we need are small and non-negative, so both readings agree on them.
                return Ok(if rec.kind == KIND_ENUM {
                    if rec.kind_flag {
                        i64::from(lo as i32)
                    } else {
                        i64::from(lo)
                    }
                } else {
                    let hi = self.u32_at(e + 8)?;
                    ((u64::from(hi) << 32) | u64::from(lo)) as i64
                });
            }
        }
        Err(BtfError::Missing(format!("enumerator {name}")))
    }
}

/// The NUL-terminated string at `name_off` in the string section `[start, end)` of `data`.
fn str_at(data: &[u8], start: usize, end: usize, name_off: u32) -> Result<&[u8], BtfError> {
    let section = data.get(start..end).unwrap_or_default();
    let rest = section
        .get(name_off as usize..)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            malformed(format!(
                "string offset {name_off} is past the string section"
            ))
        })?;
    let len = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed(format!("string at offset {name_off} is not NUL-terminated")))?;
    Ok(&rest[..len])
}

/// Fill every field of [`monitor_common::Offsets`] from the kernel's BTF, and set `ready = 1`.
pub fn kernel_offsets(btf: &Btf) -> Result<Offsets, BtfError> {
    const STRUCTS: [&str; 12] = [
        "task_struct",
        "pid",
        "upid",
        "files_struct",
        "fdtable",
        "signal_struct",
        "task_io_accounting",
        "mm_struct",
        "linux_binprm",
        "sock",
        "trace_event_raw_sched_process_fork",
        "trace_event_raw_sched_process_exec",
    ];
    // One pass over the types for every struct (start-up).
    let ids = btf.find_structs(&STRUCTS)?;
    let member = |name: &str, path: &str| {
        let id = ids
            .get(name)
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))?;
        btf.member_offset_in(*id, name, path)
    };
    let task = |path: &str| member("task_struct", path);
    let signal = |path: &str| member("signal_struct", path);
    let ioac = |path: &str| member("task_io_accounting", path);
    let mm = |path: &str| member("mm_struct", path);
    // The programs use these as array indexes, so they must be small non-negative numbers.
    let index = |name: &str| {
        let value = btf.enumerator(name)?;
        u32::try_from(value)
            .map_err(|_| malformed(format!("enumerator {name} = {value} is not a valid index")))
    };
    let mm_id = *ids
        .get("mm_struct")
        .ok_or_else(|| BtfError::Missing("struct mm_struct".into()))?;
    let (rss_counter, rss_stride, rss_typed) = btf.rss_counters(mm_id)?;
    // Arguments a kernel's tracepoints lack are not read (see `Offsets`); a tracepoint absent
    // from the BTF leaves its `tp_btf` program to fail at load, and the classic one is used.
    let args = btf.tracepoint_args(&["sched_process_exit", "sched_switch"])?;
    Ok(Offsets {
        ready: 1,
        exit_group_dead_arg: u32::from(args.get("sched_process_exit").is_some_and(|&n| n >= 2)),
        switch_prev_state_arg: u32::from(args.get("sched_switch").is_some_and(|&n| n >= 4)),
        signal_maxrss: signal("maxrss")?,
        rss_counters_typed: u32::from(rss_typed),
        task_pid: task("pid")?,
        task_tgid: task("tgid")?,
        task_start_boottime: task("start_boottime")?,
        task_comm: task("comm")?,
        task_exit_code: task("exit_code")?,
        task_utime: task("utime")?,
        task_stime: task("stime")?,
        task_sum_exec_runtime: task("se.sum_exec_runtime")?,
        task_min_flt: task("min_flt")?,
        task_maj_flt: task("maj_flt")?,
        task_nvcsw: task("nvcsw")?,
        task_nivcsw: task("nivcsw")?,
        task_ioac: task("ioac")?,
        task_signal: task("signal")?,
        task_mm: task("mm")?,
        task_real_parent: task("real_parent")?,
        signal_utime: signal("utime")?,
        signal_stime: signal("stime")?,
        signal_sum_sched_runtime: signal("sum_sched_runtime")?,
        signal_min_flt: signal("min_flt")?,
        signal_maj_flt: signal("maj_flt")?,
        signal_nvcsw: signal("nvcsw")?,
        signal_nivcsw: signal("nivcsw")?,
        signal_ioac: signal("ioac")?,
        ioac_rchar: ioac("rchar")?,
        ioac_wchar: ioac("wchar")?,
        ioac_read_bytes: ioac("read_bytes")?,
        ioac_write_bytes: ioac("write_bytes")?,
        mm_hiwater_rss: mm("hiwater_rss")?,
        // The programs read counter i at mm_rss_stat + percpu_counter_count + i * size.
        mm_rss_stat: rss_counter,
        percpu_counter_size: rss_stride,
        percpu_counter_count: 0,
        mm_arg_start: mm("arg_start")?,
        mm_arg_end: mm("arg_end")?,
        bprm_filename: member("linux_binprm", "filename")?,
        task_state: task("__state")?,
        sock_family: member("sock", "__sk_common.skc_family")?,
        // Set by `ebpf::Probes::load` from the ring buffer's size and the run's start.
        wakeup_bytes: 0,
        tree_born_after_ns: 0,
        signal_live: signal("live")?,
        task_children: task("children")?,
        task_sibling: task("sibling")?,
        // Classic tracepoint records start with their `struct trace_entry`, so offsets inside
        // the raw struct are offsets inside the record the program sees.
        tp_fork_child_pid: member("trace_event_raw_sched_process_fork", "child_pid")?,
        tp_exec_filename_loc: member("trace_event_raw_sched_process_exec", "__data_loc_filename")?,
        tp_exec_old_pid: member("trace_event_raw_sched_process_exec", "old_pid")?,
        mm_filepages: index("MM_FILEPAGES")?,
        mm_anonpages: index("MM_ANONPAGES")?,
        mm_shmempages: index("MM_SHMEMPAGES")?,
        mm_total_vm: mm("total_vm")?,
        task_files: task("files")?,
        files_fdt: member("files_struct", "fdt")?,
        fdt_max_fds: member("fdtable", "max_fds")?,
        fdt_open_fds: member("fdtable", "open_fds")?,
        task_flags: task("flags")?,
        task_thread_pid: task("thread_pid")?,
        pid_level: member("pid", "level")?,
        pid_numbers: member("pid", "numbers")?,
        upid_size: btf.type_size(
            *ids.get("upid")
                .ok_or_else(|| BtfError::Missing("struct upid".into()))?,
        )?,
        upid_nr: member("upid", "nr")?,
    })
}

#[cfg(test)]
mod tests;
