//! Reading what a 64-bit little-endian ELF executable asks of the system: its CPU and the
//! dynamic loader and shared libraries it needs (a static binary needs neither).

/// ELF program header type of the dynamic loader path.
const PT_INTERP: u32 = 3;
/// ELF program header type of the dynamic section.
const PT_DYNAMIC: u32 = 2;
/// Dynamic section tag naming a needed shared library.
const DT_NEEDED: u64 = 1;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// What a 64-bit little-endian ELF file asks of the dynamic loader: whether it names an
/// interpreter, and how many shared libraries it needs.
pub fn dynamic_needs(elf: &[u8]) -> (bool, usize) {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    assert_eq!(elf[5], 1, "not little-endian");
    let phoff = u64_at(elf, 0x20) as usize;
    let phentsize = u16_at(elf, 0x36) as usize;
    let phnum = u16_at(elf, 0x38) as usize;
    let mut interp = false;
    let mut needed = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(elf, ph) {
            PT_INTERP => interp = true,
            PT_DYNAMIC => {
                let offset = u64_at(elf, ph + 0x08) as usize;
                let size = u64_at(elf, ph + 0x20) as usize;
                needed += elf[offset..offset + size]
                    .chunks_exact(16)
                    .filter(|entry| u64_at(entry, 0) == DT_NEEDED)
                    .count();
            }
            _ => {}
        }
    }
    (interp, needed)
}

/// ELF `e_machine` of AArch64.
pub const EM_AARCH64: u16 = 183;

/// The CPU an ELF file is built for (`e_machine`).
pub fn machine(elf: &[u8]) -> u16 {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    u16_at(elf, 0x12)
}
