//! The store's keys and chunk values (layout in the module documentation of [`crate::store`]).

use xxhash_rust::xxh3::xxh3_64;

/// Key of the format version stamp.
pub(super) const KEY_FORMAT: &[u8] = b"m:format";
/// Key of the deployment's [`Identity`](super::Identity).
pub(super) const KEY_IDENTITY: &[u8] = b"m:identity";
/// The first bytes of every chunk value.
const CHUNK_MAGIC: &[u8; 4] = b"KDG1";
/// Bytes per chunk entry: fingerprint (16) and first-seen offset (4).
const ENTRY_BYTES: usize = 20;

/// Key of partition `p`'s snapshot.
pub(super) fn snapshot_key(p: i32) -> Vec<u8> {
    let mut k = b"s".to_vec();
    k.extend_from_slice(&(p as u32).to_be_bytes());
    k
}

/// Key of chunk `chunk` of generation `epoch` of partition `p`.
pub(super) fn chunk_key(p: i32, epoch: u64, chunk: u32) -> Vec<u8> {
    let mut k = b"g".to_vec();
    k.extend_from_slice(&(p as u32).to_be_bytes());
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

/// A store key, classified by the layout (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKey {
    /// `m:format`.
    Format,
    /// `m:identity`.
    Identity,
    /// `s` + partition: a [`PartitionSnapshot`](super::PartitionSnapshot).
    Snapshot(i32),
    /// `g` + partition + epoch + chunk: a chunk of a generation's fingerprints.
    Chunk {
        /// Input partition.
        partition: i32,
        /// Generation epoch.
        epoch: u64,
        /// Chunk index, from 0.
        chunk: u32,
    },
    /// Anything else (not written by this format).
    Unknown(Vec<u8>),
}

impl StoreKey {
    /// Classifies a raw key.
    pub fn parse(k: &[u8]) -> StoreKey {
        match k {
            KEY_FORMAT => StoreKey::Format,
            KEY_IDENTITY => StoreKey::Identity,
            [b's', rest @ ..] if rest.len() == 4 => {
                StoreKey::Snapshot(u32::from_be_bytes(rest.try_into().expect("4 bytes")) as i32)
            }
            [b'g', rest @ ..] if rest.len() == 16 => StoreKey::Chunk {
                partition: u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as i32,
                epoch: u64::from_be_bytes(rest[4..12].try_into().expect("8 bytes")),
                chunk: u32::from_be_bytes(rest[12..].try_into().expect("4 bytes")),
            },
            _ => StoreKey::Unknown(k.to_vec()),
        }
    }
}

/// Prefix of every chunk key of partition `p`.
pub(super) fn chunk_prefix(p: i32) -> Vec<u8> {
    let mut k = b"g".to_vec();
    k.extend_from_slice(&(p as u32).to_be_bytes());
    k
}

/// Encodes entries as one chunk value.
pub fn encode_chunk(entries: &[(u128, u32)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + entries.len() * ENTRY_BYTES + 8);
    v.extend_from_slice(CHUNK_MAGIC);
    v.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (fp, off) in entries {
        v.extend_from_slice(&fp.to_le_bytes());
        v.extend_from_slice(&off.to_le_bytes());
    }
    let sum = xxh3_64(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// A chunk value that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// Too short, or not starting with the magic bytes.
    #[error("chunk header missing")]
    Header,
    /// The checksum does not match the content.
    #[error("chunk checksum mismatch")]
    Checksum,
    /// The length does not fit the entry count.
    #[error("chunk length {length} does not fit {count} entries")]
    Length {
        /// Bytes before the checksum.
        length: usize,
        /// Entries the header announces.
        count: usize,
    },
}

/// Decodes a chunk value, verifying its magic, length and checksum.
pub fn decode_chunk(v: &[u8]) -> Result<Vec<(u128, u32)>, ChunkError> {
    if v.len() < 16 || &v[..4] != CHUNK_MAGIC {
        return Err(ChunkError::Header);
    }
    let (body, sum) = v.split_at(v.len() - 8);
    if xxh3_64(body).to_le_bytes() != sum {
        return Err(ChunkError::Checksum);
    }
    let count = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes")) as usize;
    if body.len() != 8 + count * ENTRY_BYTES {
        return Err(ChunkError::Length {
            length: body.len(),
            count,
        });
    }
    Ok(body[8..]
        .chunks_exact(ENTRY_BYTES)
        .map(|e| {
            (
                u128::from_le_bytes(e[..16].try_into().expect("16 bytes")),
                u32::from_le_bytes(e[16..].try_into().expect("4 bytes")),
            )
        })
        .collect())
}
