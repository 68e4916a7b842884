/* noop: exits at once. Built static, so its exec maps no shared libraries. Part of `cargo xtask bench`. */
int main(void) { return 0; }
