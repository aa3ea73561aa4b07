#include <cstdio>
int main() { std::puts("gradmesh"); return 0; }
