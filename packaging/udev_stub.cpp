// libhwloc.a (Debian's libhwloc-dev) reads block devices' serial numbers
// through libudev, which Debian ships only as a shared library. sgpu never
// asks hwloc for I/O devices, so these stand in for libudev: udev_new()
// answers NULL, which hwloc takes as "no udev" and reads /sys instead. The
// binary then needs nothing but glibc, and hwloc's static archive links.
extern "C" {
struct udev;
struct udev_device;
udev* udev_new() { return nullptr; }
udev* udev_unref(udev*) { return nullptr; }
udev_device* udev_device_new_from_subsystem_sysname(udev*, const char*, const char*) { return nullptr; }
udev_device* udev_device_unref(udev_device*) { return nullptr; }
const char* udev_device_get_property_value(udev_device*, const char*) { return nullptr; }
}
