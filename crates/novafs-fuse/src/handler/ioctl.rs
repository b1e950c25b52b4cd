//! chattr and lsattr through FUSE's ioctl: the flags novafs keeps, in
//! both of the kernel's forms.

use super::{failed, sent, Answer, FuseFs};
use crate::wire::reply;

/// The chattr flags novafs keeps, as FS_IOC_GETFLAGS bits and as their
/// FS_IOC_FSGETXATTR equivalents (FS_XFLAG_*).
const FLAG_BITS: [(u32, u32); 3] = [
    (novafs::FLAG_IMMUTABLE, 0x08),
    (novafs::FLAG_APPEND, 0x10),
    (novafs::FLAG_NODUMP, 0x80),
];

pub(super) fn xflags_of(flags: u32) -> u32 {
    FLAG_BITS.iter().filter(|(f, _)| flags & f != 0).map(|(_, x)| x).sum()
}

/// FS_XFLAG_* bits as chattr flags; one novafs does not keep stays set
/// outside them, so that setting it is refused.
pub(super) fn flags_of_xflags(xflags: u32) -> u32 {
    let known: u32 = FLAG_BITS.iter().map(|(_, x)| x).sum();
    let flags: u32 = FLAG_BITS.iter().filter(|(_, x)| xflags & x != 0).map(|(f, _)| f).sum();
    flags | if xflags & !known != 0 { 1 << 31 } else { 0 }
}

impl FuseFs {
    /// chattr and lsattr: FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (a 4-byte
    /// int each way), and their XFS-style twins FS_IOC_FSGETXATTR and
    /// FS_IOC_FSSETXATTR (a `struct fsxattr`), which the kernel's fileattr
    /// code also asks for. The kernel checks who may set immutable and
    /// append-only before asking.
    /// A project ID or an extent size hint in `struct fsxattr` is
    /// EOPNOTSUPP, as on tmpfs: novafs keeps neither.
    pub(super) fn ioctl(&self, ino: u64, cmd: u32, data: &[u8], out: &mut [u8]) -> Answer {
        const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
        const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
        const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
        const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
        let word = |at: usize| {
            data.get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_ne_bytes)
        };
        let mut set = |flags: Option<u32>| match flags.map(|f| self.fs.set_flags(ino, f)) {
            Some(Ok(_)) => sent("ioctl", reply::ioctl(out, 0, &[])),
            Some(Err(e)) => failed("ioctl", &e),
            None => Answer::Error(libc::EINVAL),
        };
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC_FSGETXATTR => match self.fs.getattr(ino) {
                Ok(a) if cmd == FS_IOC_GETFLAGS => sent("ioctl", reply::ioctl(out, 0, &a.flags.to_ne_bytes())),
                // struct fsxattr: fsx_xflags first, 24 bytes of zeros after.
                Ok(a) => {
                    let mut fsx = [0u8; 28];
                    fsx[..4].copy_from_slice(&xflags_of(a.flags).to_ne_bytes());
                    sent("ioctl", reply::ioctl(out, 0, &fsx))
                }
                Err(e) => failed("ioctl", &e),
            },
            FS_IOC_SETFLAGS => set(word(0)),
            // fsx_extsize, fsx_projid and fsx_cowextsize must be 0.
            FS_IOC_FSSETXATTR if [4, 12, 16].iter().any(|&at| word(at).is_some_and(|w| w != 0)) => {
                Answer::Error(libc::EOPNOTSUPP)
            }
            FS_IOC_FSSETXATTR => set(word(0).map(flags_of_xflags)),
            _ => Answer::Error(libc::ENOTTY),
        }
    }
}
