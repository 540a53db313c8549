//! placeholder replaced by the kit
